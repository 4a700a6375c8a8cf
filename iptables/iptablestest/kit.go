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
}

// NewFakes returns empty fakes for family (v1.IPv6Protocol; anything else
// means IPv4).
func NewFakes(family v1.IPFamily) *Fakes {
	return &Fakes{IPTables: NewFake(family)}
}

// Interfaces returns the fakes as an iptables.Proxier's Interfaces.
func (f *Fakes) Interfaces() iptables.Interfaces {
	return iptables.Interfaces{IPTables: f.IPTables}
}

// Dump returns the fakes' whole state as text (iptables-save format; see
// Fake.Dump).
func (f *Fakes) Dump() string { return f.IPTables.Dump() }
