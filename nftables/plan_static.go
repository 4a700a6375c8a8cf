//go:build linux

package nftables

import (
	"net/netip"
	"strings"
)

// The fixed part of the table: base chains, dispatch chains, the
// masquerade chains, the containers. Planned once per full sync (node-port
// addresses may have changed).

// baseChains are upstream v1.37's (as v1.34's): the firewall check before DNAT (-110),
// the endpoint and cluster-IP checks at filter priority (0), after DNAT.
var baseChains = []chainSpec{
	{name: chainFilterPreroutingPreDNAT, base: &baseChain{"filter", "prerouting", "dstnat-10"}},
	{name: chainFilterOutputPreDNAT, base: &baseChain{"filter", "output", "dstnat-10"}},
	{name: chainFilterInput, base: &baseChain{"filter", "input", "filter"}},
	{name: chainFilterForward, base: &baseChain{"filter", "forward", "filter"}},
	{name: chainFilterOutput, base: &baseChain{"filter", "output", "filter"}},
	{name: chainNATPrerouting, base: &baseChain{"nat", "prerouting", "dstnat"}},
	{name: chainNATOutput, base: &baseChain{"nat", "output", "dstnat"}},
	{name: chainNATPostrouting, base: &baseChain{"nat", "postrouting", "srcnat"}},
}

// staticPlan is the fixed part of the table. nodePortIPs are the addresses
// node ports are served on (matchAll: every local address).
type staticPlan struct {
	chains []chainSpec
	maps   []containerSpec
	elems  []elemSpec
}

type containerSpec struct {
	name, typ, comment string
	set                bool
	typeOf             bool // typ is a "typeof" declaration
}

func (p *planner) planStatic(nodePortIPs []netip.Addr, matchAll bool, serviceCIDRs []netip.Prefix) *staticPlan {
	st := &staticPlan{}
	rules := map[string][]ruleSpec{}
	add := func(chain, text, comment string) {
		rules[chain] = append(rules[chain], textRule(text, comment))
	}
	// Jumps from the base chains, in upstream's order.
	add(chainFilterInput, "ct state new jump "+chainNodePortEndpointsCheck, "")
	add(chainFilterInput, "ct state new jump "+chainServiceEndpointsCheck, "")
	add(chainFilterForward, "ct state new jump "+chainServiceEndpointsCheck, "")
	add(chainFilterOutput, "ct state new jump "+chainServiceEndpointsCheck, "")
	add(chainFilterPreroutingPreDNAT, "ct state new jump "+chainFirewallCheck, "")
	add(chainFilterOutputPreDNAT, "ct state new jump "+chainFirewallCheck, "")
	add(chainNATOutput, "jump "+chainServices, "")
	add(chainNATPrerouting, "jump "+chainServices, "")
	add(chainNATPostrouting, "jump "+chainMasquerading, "")
	add(chainFilterForward, "ct state new jump "+chainClusterIPsCheck, "")
	add(chainFilterOutput, "ct state new jump "+chainClusterIPsCheck, "")

	// Masquerading, as upstream v1.37: packets marked on the way in, and
	// hairpin connections (an endpoint reaching itself through its
	// service: source and DNAT destination the same local endpoint,
	// listed in hairpin-connections).
	add(chainMasquerading, "mark and "+p.masqMark+" != 0 mark set mark xor "+p.masqMark+" masquerade fully-random", "")
	add(chainMasquerading, "ct status dnat "+p.ipX+" saddr . "+p.ipX+" daddr . meta l4proto . th dport @"+setHairpin+" masquerade fully-random", "")

	add(chainClusterIPsCheck, p.ipX+" daddr @"+setClusterIPs+" reject", "Reject traffic to invalid ports of ClusterIPs")
	if len(serviceCIDRs) > 0 {
		var cidrs []string
		for _, c := range serviceCIDRs {
			if c.Addr().Is4() == (p.ipX == "ip") {
				cidrs = append(cidrs, c.Masked().String())
			}
		}
		if len(cidrs) > 0 {
			add(chainClusterIPsCheck, p.ipX+" daddr { "+strings.Join(cidrs, ", ")+" } drop", "Drop traffic to unallocated ClusterIPs")
		}
	}
	add(chainReject, "reject", "")
	tuple := p.ipX + " daddr . meta l4proto . th dport"
	add(chainServiceEndpointsCheck, tuple+" vmap @"+mapNoEndpointServices, "")
	add(chainFirewallCheck, tuple+" vmap @"+mapFirewallIPs, "")
	// Cluster-IP traffic is marked for masquerading before dispatch: all of
	// it (MasqueradeAll), or what does not come from a local pod.
	switch {
	case p.masqAll:
		add(chainServices, p.ipX+" daddr @"+setClusterIPs+" "+p.markMasq(), "masquerade all clusterIP traffic")
	case p.localMatch(true) != "":
		add(chainServices, p.ipX+" daddr @"+setClusterIPs+" "+p.localMatch(true)+" "+p.markMasq(), "masquerade clusterIP traffic from outside cluster")
	}
	add(chainServices, tuple+" vmap @"+mapServiceIPs, "")
	if matchAll {
		noLocalhost := "ip daddr != 127.0.0.0/8"
		if p.ipX == "ip6" {
			noLocalhost = "ip6 daddr != ::1"
		}
		add(chainNodePortEndpointsCheck, noLocalhost+" meta l4proto . th dport vmap @"+mapNoEndpointNodePorts, "")
		add(chainServices, "fib daddr type local "+noLocalhost+" meta l4proto . th dport vmap @"+mapServiceNodePorts, "")
	} else {
		add(chainNodePortEndpointsCheck, p.ipX+" daddr @"+setNodePortIPs+" meta l4proto . th dport vmap @"+mapNoEndpointNodePorts, "")
		add(chainServices, p.ipX+" daddr @"+setNodePortIPs+" meta l4proto . th dport vmap @"+mapServiceNodePorts, "")
	}
	localhostChains := p.planLocalhostStatic(add)
	for _, bc := range baseChains {
		c := bc
		c.rules = rules[c.name]
		c.hash = chainHash(c.base, c.rules)
		st.chains = append(st.chains, c)
	}
	for _, name := range []string{chainServices, chainServiceEndpointsCheck, chainNodePortEndpointsCheck, chainReject,
		chainClusterIPsCheck, chainFirewallCheck, chainMasquerading} {
		c := chainSpec{name: name, rules: rules[name]}
		if name == chainReject {
			c.comment = "helper for @no-endpoint-services / @no-endpoint-nodeports"
		}
		c.hash = chainHash(nil, c.rules)
		st.chains = append(st.chains, c)
	}
	st.chains = append(st.chains, localhostChains...)
	st.maps = []containerSpec{
		{name: setClusterIPs, typ: p.addrType, comment: "Active ClusterIPs", set: true},
		{name: setNodePortIPs, typ: p.addrType, comment: "IPs that accept NodePort traffic", set: true},
		{name: setHairpin, typ: p.addrType + " . " + p.addrType + " . inet_proto . inet_service", comment: "service hairpin connections", set: true},
		{name: mapNoEndpointServices, typ: p.addrType + " . inet_proto . inet_service : verdict", comment: "vmap to drop or reject packets to services with no endpoints"},
		{name: mapNoEndpointNodePorts, typ: "inet_proto . inet_service : verdict", comment: "vmap to drop or reject packets to service nodeports with no endpoints"},
		{name: mapFirewallIPs, typ: p.addrType + " . inet_proto . inet_service : verdict", comment: "destinations that are subject to LoadBalancerSourceRanges"},
		{name: mapServiceIPs, typ: p.addrType + " . inet_proto . inet_service : verdict", comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"},
		{name: mapServiceNodePorts, typ: "inet_proto . inet_service : verdict", comment: "NodePort traffic"},
	}
	for i := range numEndpointMaps {
		st.maps = append(st.maps, containerSpec{name: endpointMapName(i), typeOf: true,
			typ: "numgen random mod 1 : " + p.ipX + " daddr . " + endpointMapProto(i) + " dport", comment: "endpoints of policy chains"})
	}
	if !matchAll {
		for _, ip := range nodePortIPs {
			st.elems = append(st.elems, elemSpec{container: ctrNodePortIPs, key: addrKey(ip)})
		}
	}
	return st
}
