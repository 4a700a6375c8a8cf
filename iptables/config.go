package iptables

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Config configures a Proxier: the fields every engine shares in Common
// (node, periods, logger, clock, metrics, health, conntrack, OnSync; see
// engine.Common), the fields of the engines that write netfilter rules in
// Netfilter (MasqueradeAll, MasqueradeBit, LocalDetector and
// NodePortAddresses, whose empty value means every local address of the
// family here; see engine.Netfilter), and the iptables mode's own. Every
// zero value is documented:
//
//	iptables.Config{Common: engine.Common{NodeName: "node-1"}, Netfilter: engine.Netfilter{MasqueradeBit: 14}}
type Config struct {
	engine.Common
	engine.Netfilter

	// LocalhostNodePorts serves node ports on 127.0.0.0/8 as well, as
	// kube-proxy's iptables.localhostNodePorts (--iptables-localhost-nodeports,
	// true by default there) does: only for IPv4 (IPv6 loopback never
	// serves node ports), and only when NodePortAddresses is empty or has
	// an IPv4 CIDR holding a loopback address. Then every full sync sets
	// the sysctl net.ipv4.conf.all.route_localnet to 1 (Interfaces.Sysctl;
	// failing that, the sync fails with ErrRouteLocalnet), and writes
	// filter KUBE-FIREWALL's "block incoming localnet connections" rule
	// (hooked into INPUT and OUTPUT, as the kubelet does; Cleanup leaves
	// them) so that other hosts cannot reach services bound to loopback.
	// Zero (false): loopback addresses do not serve node ports and the
	// sysctl is not touched.
	LocalhostNodePorts bool
	// LocalAddresses lists this node's addresses for NodePortAddresses; nil
	// means the addresses of the network interfaces (net.InterfaceAddrs).
	LocalAddresses func() ([]netip.Addr, error)
}

// Interfaces is what a Proxier drives.
type Interfaces struct {
	// IPTables is one IP family's iptables: xtables.New for the real one,
	// iptablestest.NewFakes(family).Interfaces() in tests. Required. What
	// the engine does with it depends on its methods only (its
	// Capabilities: backend, in-process writes, one listing of every
	// table; its table stamps, generation and digests), so a wrapper that
	// embeds it and overrides some calls (to log, count or time them)
	// drives the same engine.
	IPTables xtables.Runner
	// Sysctl sets route_localnet when Config.LocalhostNodePorts applies;
	// nil means NewSysctl() (the real /proc/sys). It is not used
	// otherwise. iptablestest.Fakes.Interfaces() gives an in-memory one.
	Sysctl Sysctl
}

// withDefaults fills zero values and validates; family is the runner's
// ("" when there is none).
func (c Config) withDefaults(family v1.IPFamily) (Config, error) {
	common, err := c.Common.WithDefaults(family)
	if err != nil {
		return c, fmt.Errorf("iptables: %w", err)
	}
	c.Common = common
	nf, err := c.Netfilter.WithDefaults(c.IPFamily)
	if err != nil {
		return c, fmt.Errorf("iptables: %w", err)
	}
	c.Netfilter = nf
	return c, nil
}
