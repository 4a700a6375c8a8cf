package netnstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Main runs a package's tests (call it from TestMain) with XTABLES_LOCKFILE
// naming a lock file of this test process's own, in a temporary directory
// removed afterwards, unless the environment already names one.
//
// Every kernel test runs iptables in a network namespace it made, so the
// host's /run/xtables.lock, which serializes writers of the host's own
// tables, is not one it should wait on: another package's kernel tests
// running at the same time (go test runs packages in parallel), or an
// iptables user on the host, would otherwise hold a test past the engines'
// 5 s lock wait and fail it. Tests of one package still share one lock, as
// engines in one network namespace must.
func Main(m *testing.M) int {
	if os.Getenv("XTABLES_LOCKFILE") != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "svcproxy-xtables-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "netnstest: a private xtables lock:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	if err := os.Setenv("XTABLES_LOCKFILE", filepath.Join(dir, "xtables.lock")); err != nil {
		fmt.Fprintln(os.Stderr, "netnstest: a private xtables lock:", err)
		return 2
	}
	return m.Run()
}
