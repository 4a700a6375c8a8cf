package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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

// selfCheck reads back what the in-process Restore of data (its lines
// typed by ops, when given) wrote.
func (r *execRunner) selfCheck(ctx context.Context, data []byte, ops []RestoreOp) error {
	start := time.Now()
	defer func() { r.selfCheckNanos.Add(uint64(time.Since(start))) }()
	listings := map[string][]byte{}
	tables := tablesOfOps(data, ops)
	if len(ops) == 0 {
		tables = tablesOf(data)
	}
	for _, t := range tables {
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
	opts := xtblob.RestoreOptions{LockWait: r.lockWait}
	if len(ops) > 0 {
		opts.Lines = xtblobLines(ops)
	}
	err := r.verify(fam, data, listings, opts)
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

// tablesOfOps is tablesOf of data, read from the RestoreTable ops that type
// its lines.
func tablesOfOps(data []byte, ops []RestoreOp) []string {
	var out []string
	start := uint32(0)
	for _, o := range ops {
		if o.Kind == RestoreTable && o.Name > 0 && int(start)+1+int(o.Name) <= len(data) {
			name := string(data[start+1 : start+1+uint32(o.Name)])
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		start = o.End
	}
	return out
}
