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

// localMatchRule is localMatch(false) as a typed rule's match (ok false
// when detection is off).
func (p *planner) localMatchRule() (ruleSpec, bool) {
	r := ruleSpec{v6: p.v6()}
	switch p.local.Mode {
	case proxy.LocalModeClusterCIDR, proxy.LocalModeNodeCIDR:
		c := p.local.CIDR.Masked()
		r.match, r.addr, r.bits = matchSaddr, c.Addr(), uint8(c.Bits())
	case proxy.LocalModeBridgeInterface:
		r.match, r.ext().set = matchIifname, p.local.Interface
	case proxy.LocalModeInterfaceNamePrefix:
		r.match, r.ext().set = matchIifname, p.local.Interface+"*"
	default:
		return r, false
	}
	return r, true
}

func quote(s string) string { return "\"" + s + "\"" }

// markMasq marks a packet for masquerading (the masquerading chain
// masquerades marked packets), written inline as upstream v1.37 does.
func (p *planner) markMasq() string { return "mark set mark or " + p.masqMark }

// markMasqRule is markMasq as a typed rule, after match m (matchNone or
// matchFibLocal).
func (p *planner) markMasqRule(m matchKind, comment string) ruleSpec {
	r := ruleSpec{match: m, stmt: stmtMarkOr, mark: p.masqMarkBits}
	if comment != "" {
		r.x = &ruleExt{comment: comment}
	}
	return r
}
