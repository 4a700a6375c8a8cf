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
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	skipUnlessRunnable(t, what, takes)
	out, err := runScript(t, script, limit, args...)
	t.Log("in the VM:\n" + Report(out))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Shared is one guest run of a hack/vmtest script whose guest runs several
// tests of the calling package (the script's -test.run names them all):
// one boot and one copy of the binaries instead of one per test. Each of
// those tests calls Check; the first to call starts the guest, the others
// wait for it, and each passes or fails on its own lines of the guest's
// `go test -v` output.
type Shared struct {
	What   string        // names the run in messages
	Takes  string        // how long it usually takes, for the skip messages
	Script string        // under hack/vmtest
	Limit  time.Duration // bounds the run (and the first caller's deadline, less a minute)
	Args   []string      // for the script

	once sync.Once
	by   string // the test that ran the guest and logged its report
	out  string
	err  error
}

// Check skips t as Run does, runs the guest once (see Shared), and fails
// t unless the guest's output has "--- PASS: <t.Name()> " and no SKIP line
// of t or its subtests. The test that started the guest logs its report,
// and so does any other that fails (the first one's log may not be shown).
func (s *Shared) Check(t *testing.T) {
	t.Helper()
	skipUnlessRunnable(t, s.What, s.Takes)
	s.once.Do(func() {
		s.by = t.Name()
		s.out, s.err = runScript(t, s.Script, s.Limit, s.Args...)
		t.Log("in the VM:\n" + Report(s.out))
	})
	why := testOutcome(s.out, t.Name())
	if s.by != t.Name() {
		if why == "" {
			t.Logf("in the VM: see %s's log for the guest's report", s.by)
		} else {
			// that test's log may never be printed (it passed)
			t.Log("in the VM:\n" + Report(s.out))
		}
	}
	if why != "" {
		if s.err != nil {
			t.Fatalf("%s: %s (the run: %v)", s.What, why, s.err)
		}
		t.Fatalf("%s: %s", s.What, why)
	}
}

// testOutcome is "" when out (a `go test -v` output) shows test passed
// and neither it nor a subtest of it skipped; otherwise what went wrong.
func testOutcome(out, test string) string {
	passed := false
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "--- PASS: "+test+" "):
			passed = true
		case strings.HasPrefix(line, "--- SKIP: "+test+" "), strings.HasPrefix(line, "--- SKIP: "+test+"/"):
			return "skipped inside the VM: " + line
		}
	}
	if !passed {
		return test + " did not pass inside the VM"
	}
	return ""
}

func skipUnlessRunnable(t *testing.T, what, takes string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s: runs in a qemu guest (%s under TCG); skipped with -short", what, takes)
	}
	if os.Geteuid() != 0 {
		t.Skipf("%s: needs root (the VM runner installs qemu and downloads the kernel with apt-get)", what)
	}
	for _, tool := range []string{"apt-get", "dpkg", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: the VM runner needs %s, not found: %v", what, tool, err)
		}
	}
}

// runScript runs hack/vmtest/<script> bounded by limit and t's deadline
// (less a minute) and returns its output; the error says why it failed.
func runScript(t *testing.T, script string, limit time.Duration, args ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < limit {
		limit = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "vmtest", script)}, args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SVCPROXY_VMTEST_QUIET=1")
	killGroupOnCancel(cmd)
	// Past the limit, the output read so far is the log: the guest's
	// processes may hold the pipe a moment after the kill.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), fmt.Errorf("hack/vmtest/%s did not finish within %v", script, limit.Round(time.Second))
	}
	if err != nil {
		return string(out), fmt.Errorf("in the VM: %v", err)
	}
	return string(out), nil
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
