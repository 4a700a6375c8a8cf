package xtablestest_test

import (
	"os"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
)

// TestMain gives this package's kernel tests an xtables lock of their own
// (netnstest.Main), never the host's.
func TestMain(m *testing.M) { os.Exit(netnstest.Main(m)) }
