package iptablestest

import (
	"maps"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Sysctl is the in-memory /proc/sys (proxytest.Sysctl) the kit's
// iptables.Sysctl is.
type Sysctl = proxytest.Sysctl

var _ iptables.Sysctl = (*Sysctl)(nil)

// NewSysctl returns a fake holding the kernel's default for the one
// setting the engine uses (iptables.SysctlRouteLocalnet = 0), then values
// (may be nil). Reading any other name never written fails with an error
// wrapping fs.ErrNotExist.
func NewSysctl(values map[string]int) *Sysctl {
	v := map[string]int{iptables.SysctlRouteLocalnet: 0}
	maps.Copy(v, values)
	return proxytest.NewSysctl(v)
}

// routeLocalnet reports the fake's route_localnet (for the Tracer).
func routeLocalnet(f *Sysctl) bool {
	v, _ := f.Value(iptables.SysctlRouteLocalnet)
	return v != 0
}
