//go:build linux

package ipvs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKernelInVM makes the ordinary `go test ./...` (as root) cover the
// real-kernel IPVS tests on a host whose kernel has no IPVS: it boots a
// Debian kernel that has ip_vs under qemu (hack/vmtest) and runs this
// package's Kernel tests there as root, failing when any of them fails or
// skips. Where this kernel has IPVS, the Kernel tests run directly instead.
func TestKernelInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM (about three minutes under TCG); skipped with -short")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		t.Skip("this kernel has IPVS: the Kernel tests run directly, no VM needed")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the VM runner installs qemu and downloads the kernel with apt-get")
	}
	for _, tool := range []string{"apt-get", "dpkg", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the VM runner needs %s, not found: %v", tool, err)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "vmtest", "run-ipvs-tests.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SVCPROXY_VMTEST_QUIET=1")
	out, err := cmd.CombinedOutput()
	// The guest's `go test -v` report, minus the RUN lines.
	var kept []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "=== RUN") && !strings.Contains(line, "=== PAUSE") && !strings.Contains(line, "=== CONT") {
			kept = append(kept, line)
		}
	}
	t.Log("in the VM:\n" + strings.Join(kept, "\n"))
	if err != nil {
		t.Fatalf("real-kernel IPVS tests in the VM: %v", err)
	}
}
