package netnstest

import (
	"os"
	"runtime"
	"testing"
)

// SkipUnlessRoot skips t unless it runs as root on Linux, which the
// real-kernel tests need to create network namespaces, veth pairs and
// iptables rules. The reason says how to run them.
func SkipUnlessRoot(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("netnstest: real-kernel test needs Linux network namespaces (GOOS=%s)", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		t.Skip("netnstest: real-kernel test needs root (network namespaces, veth, iptables); run it as root, e.g. sudo go test -count=1 ./...")
	}
}
