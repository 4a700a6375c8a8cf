package ipvstest

import (
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/ipvs"
)

// Fakes is everything an ipvs.Proxier drives, in memory: the kit's one
// bundle (the same shape as every …test package's Fakes). Each fake embeds
// proxytest.Faults, so failures are injected with the same verbs
// everywhere: f.IPVS.FailOn("AddRealServer", 1, err),
// f.IPTables.FailOn("Restore", 1, err).
type Fakes struct {
	IPVS     *IPVS
	IPSet    *IPSet
	Netlink  *Netlink
	IPTables *xtablestest.Fake
	Sysctl   *Sysctl

	family v1.IPFamily
}

// NewFakes returns empty fakes for a proxier of family ("" is IPv4): an
// empty IPVS table, no sets, a node with only "lo" (add its links with
// f.Netlink.AddLink), empty iptables of the family, and no sysctls set.
func NewFakes(family v1.IPFamily) *Fakes {
	if family == "" {
		family = v1.IPv4Protocol
	}
	return &Fakes{
		IPVS:     NewIPVS(),
		IPSet:    NewIPSet(),
		Netlink:  NewNetlink(),
		IPTables: xtablestest.NewFake(family),
		Sysctl:   NewSysctl(nil),
		family:   family,
	}
}

// Family is the IP family the fakes were made for.
func (f *Fakes) Family() v1.IPFamily { return f.family }

// Interfaces returns the fakes as what ipvs.NewProxier takes.
func (f *Fakes) Interfaces() ipvs.Interfaces {
	return ipvs.Interfaces{IPVS: f.IPVS, IPSet: f.IPSet, Netlink: f.Netlink, IPTables: f.IPTables, Sysctl: f.Sysctl}
}

// Dump renders the whole node state a Proxier owns, one section per fake:
// `ipvsadm -Ln`, `ip addr show kube-ipvs0`, `ipset list` and
// `iptables-save`.
func (f *Fakes) Dump() string {
	var b strings.Builder
	b.WriteString("# ipvsadm -Ln\n")
	b.WriteString(f.IPVS.Dump())
	b.WriteString("\n# ip addr show kube-ipvs0\n")
	b.WriteString(f.Netlink.Dump(ipvs.DummyDevice))
	b.WriteString("\n# ipset list\n")
	b.WriteString(f.IPSet.Dump())
	b.WriteString("\n# iptables-save\n")
	b.WriteString(f.IPTables.Dump())
	return b.String()
}

// Mutations is the number of calls that changed the IPVS table, the sets
// or the links since the fakes were made or ResetCalls (iptables aside).
func (f *Fakes) Mutations() int {
	return f.IPVS.Mutations() + f.IPSet.Mutations() + f.Netlink.Mutations()
}

// Deletions is the number of delete calls on the IPVS table, the sets and
// the links.
func (f *Fakes) Deletions() int {
	return f.IPVS.Deletions() + f.IPSet.Deletions() + f.Netlink.Deletions()
}

// ResetCalls zeroes the call counters of every fake.
func (f *Fakes) ResetCalls() {
	f.IPVS.ResetCalls()
	f.IPSet.ResetCalls()
	f.Netlink.ResetCalls()
	f.IPTables.ResetCalls()
	f.Sysctl.ResetCalls()
}

// Heal removes every injected failure from every fake.
func (f *Fakes) Heal() {
	f.IPVS.Heal()
	f.IPSet.Heal()
	f.Netlink.Heal()
	f.IPTables.Heal()
	f.Sysctl.Heal()
}
