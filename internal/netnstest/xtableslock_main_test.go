package netnstest

import (
	"os"
	"testing"
)

// TestMain gives this package's kernel tests an xtables lock of their own
// (Main), never the host's.
func TestMain(m *testing.M) { os.Exit(Main(m)) }
