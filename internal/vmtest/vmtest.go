// Package vmtest lets an ordinary `go test` (as root) run a test suite that
// needs a kernel feature this host lacks, IPVS above all, inside the qemu
// guest of hack/vmtest: it runs one of that directory's scripts, which
// build the test binary, boot the guest and check that nothing skipped
// there, and turns the script's result into the calling test's.
//
// Not API: the scripts and their environment belong to this repository.
package vmtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Run runs hack/vmtest/<script> from the module root with args, bounded
// by limit and by the test's own deadline (less a minute), logs the
// guest's test report (minus the RUN/PAUSE/CONT lines), and fails t when
// the script fails. what names the run in the failure message and
// takes says how long it usually takes, for the skip messages. It skips,
// saying why, under -short, when not root, or when a tool the runner
// needs (apt-get, dpkg, go) is missing.
func Run(t *testing.T, what, takes, script string, limit time.Duration, args ...string) {
	t.Helper()
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < limit {
		limit = time.Until(d) - time.Minute
	}
	Start(what, takes, script, limit, args...).Wait(t)
}

// A Guest is one run of a hack/vmtest script, started by Start before the
// test that reports it (Wait) runs: a TestMain starts it, so that the
// guest, mostly one busy core under TCG, runs beside the package's other
// tests instead of after its sequential ones.
type Guest struct {
	what, script string
	limit        time.Duration
	cancel       context.CancelFunc
	skip         string // why it cannot run here; "" when it ran
	done         chan struct{}
	out          []byte
	err          error
	timedOut     bool
}

// Start starts hack/vmtest/<script> from the module root with args in the
// background, bounded by limit and by -test.timeout (less a minute), and
// returns at once; Wait reports it. It starts nothing, and Wait skips
// saying why, where Run would skip. Call it after flag.Parse (TestMain).
func Start(what, takes, script string, limit time.Duration, args ...string) *Guest {
	g := &Guest{what: what, script: script, done: make(chan struct{})}
	if g.skip = cannotRun(what, takes); g.skip != "" {
		close(g.done)
		return g
	}
	root, err := moduleRoot()
	if err != nil {
		g.err = err
		close(g.done)
		return g
	}
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && d > 0 && d-time.Minute < limit {
			limit = d - time.Minute
		}
	}
	g.limit = limit
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	g.cancel = cancel
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "vmtest", script)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SVCPROXY_VMTEST_QUIET=1")
	killGroupOnCancel(cmd)
	// Past the limit, the output read so far is the log: the guest's
	// processes may hold the pipe a moment after the kill.
	cmd.WaitDelay = 10 * time.Second
	go func() {
		defer close(g.done)
		defer cancel()
		g.out, g.err = cmd.CombinedOutput()
		g.timedOut = ctx.Err() != nil
	}()
	return g
}

// cannotRun says why the runner cannot run here ("" when it can).
func cannotRun(what, takes string) string {
	if testing.Short() {
		return fmt.Sprintf("%s: runs in a qemu guest (%s under TCG); skipped with -short", what, takes)
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("%s: needs root (the VM runner installs qemu and downloads the kernel with apt-get)", what)
	}
	for _, tool := range []string{"apt-get", "dpkg", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("%s: the VM runner needs %s, not found: %v", what, tool, err)
		}
	}
	return ""
}

// Stop kills the guest (its script's whole process group) if it is still
// running and waits for it: for a TestMain whose tests ended without
// waiting for a guest it started.
func (g *Guest) Stop() {
	if g.cancel != nil {
		g.cancel()
	}
	<-g.done
}

// Wait waits for the guest, logs its test report (minus the RUN, PAUSE
// and CONT lines) and fails t when the script failed or ran out of time;
// it skips t where the runner cannot run.
func (g *Guest) Wait(t *testing.T) {
	t.Helper()
	<-g.done
	if g.skip != "" {
		t.Skip(g.skip)
	}
	if g.out != nil {
		t.Log("in the VM:\n" + Report(string(g.out)))
	}
	if g.timedOut {
		t.Fatalf("%s: hack/vmtest/%s did not finish within %v", g.what, g.script, g.limit.Round(time.Second))
	}
	if g.err != nil {
		t.Fatalf("%s in the VM: %v", g.what, g.err)
	}
}

// Report is a `go test -v` output without its RUN, PAUSE and CONT lines.
func Report(out string) string {
	var kept []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "=== RUN") || strings.Contains(line, "=== PAUSE") || strings.Contains(line, "=== CONT") {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}

// moduleRoot is the nearest directory up from the working directory that
// holds go.mod (go test runs a test in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("vmtest: no go.mod above the working directory")
		}
		dir = parent
	}
}
