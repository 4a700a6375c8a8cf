package engine

import (
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// DefaultMasqueradeBit is the packet-mark bit of Netfilter's zero
// MasqueradeBit: kube-proxy's --masquerade-bit default.
const DefaultMasqueradeBit = 14

// Netfilter is the part of the Config of the engines that write netfilter
// rules which they all share: iptables, nftables, and ipvs (whose
// masquerading and node-port filtering are iptables rules beside the IPVS
// table). It says who is masqueraded and with which packet-mark bit, what
// is traffic from this node's pods, and which node addresses serve node
// ports. Those Configs embed it beside Common as their field Netfilter,
// so its fields read as the engine's own (cfg.MasqueradeBit), and one
// value can be handed to any of the three:
//
//	nf := engine.Netfilter{LocalDetector: detector, NodePortAddresses: npa}
//	ipt, err := iptables.NewProxier(iptables.Config{Common: common, Netfilter: nf}, ifs)
//	nft, err := nftables.NewProxier(nftables.Config{Common: common, Netfilter: nf}, nftIfs)
//
// The userspace and winkernel engines write no netfilter rules and have
// none of these fields. Every field has a documented zero value.
type Netfilter struct {
	// MasqueradeAll masquerades all traffic to cluster IPs (kube-proxy's
	// --masquerade-all).
	MasqueradeAll bool
	// MasqueradeBit is the packet-mark (fwmark) bit, 0..31, that marks
	// packets to masquerade (kube-proxy's --masquerade-bit). 0 means
	// DefaultMasqueradeBit (14); use -1 to mean bit 0.
	MasqueradeBit int
	// LocalDetector says which traffic comes from this node's pods (zero:
	// none; cluster-IP traffic is then masqueraded only with
	// MasqueradeAll).
	LocalDetector proxy.LocalDetector
	// NodePortAddresses restricts node ports to this node's addresses
	// inside these CIDRs (kube-proxy's --nodeport-addresses). CIDRs of the
	// other IP family are ignored; a list with none of the proxier's
	// family means no node ports in that family. What an empty list
	// means differs per engine, as it does upstream:
	//
	//   - iptables: every local address of the family (matched with
	//     "-m addrtype --dst-type LOCAL"; loopback ones only as
	//     iptables.Config.LocalhostNodePorts says). A CIDR covering the
	//     whole family (0.0.0.0/0, ::/0) means the same.
	//   - ipvs: every address of the family on every link but kube-ipvs0,
	//     loopback and link-local ones excluded (as kube-proxy). A CIDR
	//     covering the whole family means the same.
	//   - nftables: the node IPs (Common.NodeIPs of the family), as
	//     upstream's nftables mode. A CIDR covering the whole family means
	//     every local address instead ("fib daddr type local"). Loopback
	//     addresses serve node ports only as
	//     nftables.Config.LocalhostNodePorts says.
	NodePortAddresses []netip.Prefix
}

// WithDefaults returns n with its zero values replaced by their defaults,
// validated for a proxier of family (the engine's Common.IPFamily, after
// Common.WithDefaults). The engines call it from their constructors.
func (n Netfilter) WithDefaults(family v1.IPFamily) (Netfilter, error) {
	switch {
	case n.MasqueradeBit == 0:
		n.MasqueradeBit = DefaultMasqueradeBit
	case n.MasqueradeBit == -1:
		n.MasqueradeBit = 0
	case n.MasqueradeBit < 0 || n.MasqueradeBit > 31:
		return n, fmt.Errorf("MasqueradeBit %d out of range 0..31", n.MasqueradeBit)
	}
	if err := n.LocalDetector.Validate(family); err != nil {
		return n, err
	}
	for _, p := range n.NodePortAddresses {
		if !p.IsValid() {
			return n, errors.New("NodePortAddresses holds an invalid (zero) prefix")
		}
	}
	return n, nil
}
