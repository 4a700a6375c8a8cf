package xtablestest

import (
	"maps"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// RouteLocalnet is the sysctl (relative to /proc/sys) the Tracer reads
// from TracerConfig.Sysctl: whether the kernel routes 127.0.0.0/8
// addresses off the loopback device. The iptables engine sets it for
// Config.LocalhostNodePorts (iptables.SysctlRouteLocalnet, the same name).
const RouteLocalnet = "net/ipv4/conf/all/route_localnet"

// Sysctl is the in-memory /proc/sys (proxytest.Sysctl) a Tracer reads
// route_localnet from.
type Sysctl = proxytest.Sysctl

// NewSysctl returns a fake holding the kernel's default for
// RouteLocalnet (0), then values (may be nil). Reading any other name
// never written fails with an error wrapping fs.ErrNotExist.
func NewSysctl(values map[string]int) *Sysctl {
	v := map[string]int{RouteLocalnet: 0}
	maps.Copy(v, values)
	return proxytest.NewSysctl(v)
}

// routeLocalnet reports the fake's route_localnet (for the Tracer).
func routeLocalnet(f *Sysctl) bool {
	v, _ := f.Value(RouteLocalnet)
	return v != 0
}
