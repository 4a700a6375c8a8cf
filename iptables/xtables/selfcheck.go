package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// The self-check of the in-process path (legacy backend). The first
// Restore written from the process, and the first after each
// CheckNextRestore (the engines call it at the start of every full sync),
// is read back: every user chain the input declares is listed with
// iptables-legacy-save and read from the kernel, and both must be, entry
// for entry, the input's rules for it (xtblob.Verify). A difference turns
// the in-process path off for the rest of the Runner's life (logged at
// error level, counted in InProcessStats.SelfCheckFailures and through
// RunnerConfig.OnInProcessOff) and fails the Restore with an error
// matching ErrSelfCheck, so the engine's next sync, a full one, rewrites
// what differs through the tool. A read-back that cannot be made (the
// lock held, a listing failing) is logged and proves nothing either way.

// CheckNextRestore implements Runner: the next Restore written in process
// is read back (the first one always is); with the tool it does nothing.
func (r *execRunner) CheckNextRestore() {
	if r.inProcess.Load() {
		r.checkNext.Store(true)
	}
}

// selfCheck reads back what the in-process Restore of data wrote.
func (r *execRunner) selfCheck(ctx context.Context, data []byte) error {
	start := time.Now()
	defer func() { r.selfCheckNanos.Add(uint64(time.Since(start))) }()
	listings := map[string][]byte{}
	for _, t := range tablesOf(data) {
		var buf bytes.Buffer
		if err := r.listTable(ctx, Table(t), &buf); err != nil {
			r.log.Info("Could not read back what the in-process restore wrote; not checked", "table", t, "err", err.Error())
			return nil
		}
		listings[t] = buf.Bytes()
	}
	fam := xtblob.IPv4
	if r.family == v1.IPv6Protocol {
		fam = xtblob.IPv6
	}
	err := r.verify(fam, data, listings, xtblob.RestoreOptions{LockWait: r.lockWait})
	r.selfChecks.Add(1)
	switch {
	case errors.Is(err, xtblob.ErrMismatch):
		r.selfCheckFailures.Add(1)
		r.switchOff(OffSelfCheck, err, "The tables do not read back as the in-process restore wrote them; restoring with iptables-legacy-restore from now on")
		return &RestoreError{Output: err.Error(), Err: fmt.Errorf("%w: %w", ErrSelfCheck, err)}
	case err != nil:
		r.log.Info("Could not read back what the in-process restore wrote; not checked", "err", err.Error())
		return nil
	}
	r.log.V(2).Info("The tables read back as the in-process restore wrote them", "tables", len(listings))
	return nil
}

// tablesOf lists the tables of an iptables-restore input, in order.
func tablesOf(data []byte) []string {
	var out []string
	seen := map[string]bool{}
	sc := lines.New(data)
	for sc.Scan() {
		l := sc.Line()
		if len(l) < 2 || l[0] != '*' {
			continue // split only the headers (BenchmarkKernelColdStart's input is one large restore)
		}
		if f := bytes.Fields(l); len(f) > 0 && len(f[0]) > 1 {
			name := string(f[0][1:])
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}
