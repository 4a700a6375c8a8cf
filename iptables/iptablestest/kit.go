package iptablestest

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
)

// Fakes is everything an iptables Proxier drives, in memory: the kit's
// bundle, the same shape in every …test package.
type Fakes struct {
	// IPTables is the one IP family's iptables.
	IPTables *Fake
	// Sysctl is the node's /proc/sys (route_localnet, which the engine
	// sets for Config.LocalhostNodePorts and the Tracer obeys).
	Sysctl *Sysctl
}

// NewFakes returns empty fakes for family (v1.IPv6Protocol; anything else
// means IPv4).
func NewFakes(family v1.IPFamily) *Fakes {
	return &Fakes{IPTables: NewFake(family), Sysctl: NewSysctl(nil)}
}

// Interfaces returns the fakes as an iptables.Proxier's Interfaces.
func (f *Fakes) Interfaces() iptables.Interfaces {
	ifs := iptables.Interfaces{IPTables: f.IPTables}
	if f.Sysctl != nil {
		ifs.Sysctl = f.Sysctl
	}
	return ifs
}

// Dump returns the iptables fake's state as text (iptables-save format;
// see Fake.Dump). Sysctl.Dump has the sysctls.
func (f *Fakes) Dump() string { return f.IPTables.Dump() }
