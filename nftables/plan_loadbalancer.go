//go:build linux

package nftables

import "strings"

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
		key := join3(ip.String(), pp.proto, pp.port)
		if pp.hasEndpoints {
			sp.addElem(mapServiceIPs, key, "goto "+pp.names.external, "")
		}
		if len(ranges) > 0 {
			sp.addElem(mapFirewallIPs, key, "goto "+pp.names.firewall, "")
		}
		if !pp.hasExternal {
			sp.addElem(mapNoEndpointServices, key, pp.externalVerdict, svcComment(pp.spn))
		}
	}
	if len(ranges) == 0 {
		return
	}
	var b strings.Builder
	allowNode := false
	for i, r := range ranges {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.String())
		allowNode = allowNode || (p.nodeIP.IsValid() && r.Contains(p.nodeIP))
	}
	if allowNode {
		// A node-local VIP answered by the node itself arrives with the
		// VIP as its source: let it through when the node is allowed.
		for _, ip := range vips {
			b.WriteString(", ")
			b.WriteString(ip.String())
		}
	}
	sp.addChain(chainSpec{name: pp.names.firewall, rules: []ruleSpec{
		{text: p.ipX + " saddr != { " + b.String() + " } drop"},
	}})
}
