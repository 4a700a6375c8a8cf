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

// markMasq marks a packet for masquerading (the masquerading chain
// masquerades marked packets), written inline as upstream v1.37 does.
func (p *planner) markMasq() string { return "mark set mark or " + p.masqMark }
