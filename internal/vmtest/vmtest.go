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
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
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
	t.Log("in the VM:\n" + Report(string(out)))
	if ctx.Err() != nil {
		t.Fatalf("%s: hack/vmtest/%s did not finish within %v", what, script, limit.Round(time.Second))
	}
	if err != nil {
		t.Fatalf("%s in the VM: %v", what, err)
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
