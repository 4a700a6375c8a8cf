//go:build !linux

package netnstest

import (
	"testing"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// NewEnv needs Linux; elsewhere it skips t.
func NewEnv(t testing.TB, topo proxytest.Topology) *Env {
	t.Helper()
	SkipUnlessRoot(t)
	t.Skip("netnstest: needs Linux")
	return nil
}
