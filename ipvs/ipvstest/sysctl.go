package ipvstest

import (
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Sysctl is the in-memory /proc/sys (proxytest.Sysctl) the kit's
// ipvs.Sysctl is. Reading a name never written fails with an error
// wrapping fs.ErrNotExist unless seeded.
type Sysctl = proxytest.Sysctl

var _ ipvs.Sysctl = (*Sysctl)(nil)

// NewSysctl returns a fake seeded with values (may be nil).
func NewSysctl(values map[string]int) *Sysctl { return proxytest.NewSysctl(values) }
