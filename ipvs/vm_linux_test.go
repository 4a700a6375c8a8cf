//go:build linux

package ipvs_test

import (
	"os"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/vmtest"
)

// TestKernelInVM makes the ordinary `go test ./...` (as root) cover the
// real-kernel IPVS tests on a host whose kernel has no IPVS: it boots a
// Debian kernel that has ip_vs under qemu (hack/vmtest) and runs this
// package's Kernel tests there as root, failing when any of them fails or
// skips. Where this kernel has IPVS, the Kernel tests run directly instead.
func TestKernelInVM(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		t.Skip("this kernel has IPVS: the Kernel tests run directly, no VM needed")
	}
	vmtest.Run(t, "the real-kernel IPVS tests", "about three minutes", "run-ipvs-tests.sh", 25*time.Minute)
}
