package iptables_test

import (
	"flag"
	"os"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/iptables"
)

// TestMain gives this package's kernel tests an xtables lock of their own
// (netnstest.Main), never the host's. Benchmarks run without the check of
// every payload's ops against its text, which the tests make.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		iptables.SetCheckOps(false)
	}
	os.Exit(netnstest.Main(m))
}
