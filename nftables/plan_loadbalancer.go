//go:build linux

package nftables

// planLoadBalancer: load-balancer ingress IPs dispatch like external IPs;
// with loadBalancerSourceRanges, new connections to them first pass the
// firewall chain (through firewall-ips), which drops sources outside the
// ranges.
func (p *planner) planLoadBalancer(sp *servicePlan, pp *portPlan) {
	vips := pp.svc.LoadBalancerVIPs()
	if len(vips) == 0 {
		return
	}
	ranges := pp.svc.LoadBalancerSourceRanges()
	for _, ip := range vips {
		key := pp.key(ip)
		if pp.hasEndpoints {
			sp.addElem(ctrServiceIPs, key, gotoVerdict(pp.names.externalChain()), "")
		}
		if len(ranges) > 0 {
			sp.addElem(ctrFirewallIPs, key, gotoVerdict(pp.names.firewallChain()), "")
		}
		if !pp.hasExternal {
			sp.addElem(ctrNoEndpointServices, key, pp.externalVerdict, svcComment(pp.spn))
		}
	}
	if len(ranges) == 0 {
		return
	}
	fw := &addrList{}
	allowNode := false
	for _, r := range ranges {
		fw.prefixes = append(fw.prefixes, r)
		allowNode = allowNode || (p.nodeIP.IsValid() && r.Contains(p.nodeIP))
	}
	if allowNode {
		// A node-local VIP answered by the node itself arrives with the
		// VIP as its source: let it through when the node is allowed.
		fw.addrs = vips
	}
	sp.addChain(chainSpec{name: pp.names.firewallChain(), rules: []ruleSpec{
		{match: matchSaddrNotIn, stmt: stmtDrop, v6: p.v6(), x: &ruleExt{notIn: fw}},
	}})
}
