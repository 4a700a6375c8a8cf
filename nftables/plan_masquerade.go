//go:build linux

package nftables

import "github.com/svcproxy/svcproxy/proxy"

// localMatch is the nft match for "from a local pod" (negate: "not from a
// local pod"), or "" when detection is off.
func (p *planner) localMatch(negate bool) string {
	op := " "
	if negate {
		op = " != "
	}
	switch p.local.Mode {
	case proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR:
		return p.ipX + " saddr" + op + p.local.CIDR.Masked().String()
	case proxy.LocalModeBridgeInterface:
		return "iifname" + op + quote(p.local.Interface)
	case proxy.LocalModeInterfaceNamePrefix:
		return "iifname" + op + quote(p.local.Interface+"*")
	}
	return ""
}

func quote(s string) string { return "\"" + s + "\"" }

// masqueradeRule is the first rule of the internal policy chain: with
// MasqueradeAll every packet to the cluster IP is marked, else those not
// from local pods (off-node clients routed to the service range, and the
// node itself). As upstream v1.34, it matches the cluster IP only: the
// chain is reached through service-ips for this port alone.
func (p *planner) masqueradeRule(pp *portPlan) (ruleSpec, bool) {
	match := p.ipX + " daddr " + pp.svc.ClusterIP().String()
	switch {
	case p.masqAll:
		return ruleSpec{text: match + " jump " + chainMarkMasq}, true
	case p.localMatch(true) != "":
		return ruleSpec{text: match + " " + p.localMatch(true) + " jump " + chainMarkMasq}, true
	}
	return ruleSpec{}, false
}
