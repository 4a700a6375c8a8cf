package iptables_test

import (
	"os"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/iptables"
)

// TestMain gives this package's kernel tests an xtables lock of their own
// (netnstest.Main), never the host's. Benchmarks run without the check of
// every payload's ops against its text, which the tests make.
func TestMain(m *testing.M) {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.bench=") && a != "-test.bench=" {
			iptables.SetCheckOps(false)
		}
	}
	os.Exit(netnstest.Main(m))
}
