//go:build linux

package nftables

import (
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// endpoint wraps the tracker's endpoint with its chain and affinity-set
// names (computed once, through the tracker's MakeEndpoint hook).
type endpoint struct {
	proxy.Endpoint
	names epNames
}

type epNames struct{ chain, affinity string }

func endpointNames(spn proxy.ServicePortName, ep proxy.Endpoint) epNames {
	if w, ok := ep.(*endpoint); ok {
		return w.names
	}
	base := endpointNameBase(spn, ep.String())
	return epNames{chain: prefixEndpointChain + base, affinity: prefixAffinitySet + base}
}

// planPolicyChains writes the cluster and local policy chains: affinity
// lookups first, then a random choice among the endpoints (numgen).
func (p *planner) planPolicyChains(sp *servicePlan, pp *portPlan) {
	for _, c := range []struct {
		name string
		eps  []proxy.Endpoint
	}{{pp.clusterChain, pp.clusterEndpoints}, {pp.localChain, pp.localEndpoints}} {
		if c.name == "" {
			continue
		}
		var rules []ruleSpec
		if c.name == pp.internalChain && pp.hasInternal {
			if r, ok := p.masqueradeRule(pp); ok {
				rules = append(rules, r)
			}
		}
		if pp.svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
			for _, ep := range c.eps {
				n := endpointNames(pp.spn, ep)
				rules = append(rules, ruleSpec{text: p.ipX + " saddr @" + n.affinity + " goto " + n.chain})
			}
		}
		rules = append(rules, dispatchRules(pp.spn, c.eps)...)
		sp.addChain(chainSpec{name: c.name, rules: rules})
	}
}

// dispatchRules pick one of eps at random, each with probability 1/len(eps):
// rule i (of n) goes to endpoint i with probability 1/(n-i), the last
// always, as kube-proxy's iptables mode does with statistic matches.
//
// Upstream's nftables mode writes one rule, "numgen random mod N vmap { 0 :
// goto A, 1 : goto B, ... }", but every such inline vmap is an anonymous
// set in the kernel, and the kernel names a new anonymous set by scanning
// every set of the table (nf_tables_set_alloc_name, a sscanf per set),
// while nft's cache reads them all before every transaction: with one per
// service a cold start is quadratic in the number of services (40,000
// chains: 35 s in the kernel, against 1.5 s with these rules) and every
// partial sync pays for the whole table (see BENCHMARKS.md). Tables left by
// upstream are adopted all the same: their chains carry no content hash, so
// the first full sync rewrites them.
func dispatchRules(spn proxy.ServicePortName, eps []proxy.Endpoint) []ruleSpec {
	rules := make([]ruleSpec, 0, len(eps))
	for i, ep := range eps {
		chain := endpointNames(spn, ep).chain
		if left := len(eps) - i; left > 1 {
			rules = append(rules, ruleSpec{text: "numgen random mod " + strconv.Itoa(left) + " 0 goto " + chain})
		} else {
			rules = append(rules, ruleSpec{text: "goto " + chain})
		}
	}
	return rules
}

// planEndpointChains writes one chain per reachable endpoint: masquerade
// hairpin traffic (the endpoint reaching itself), record affinity, DNAT.
func (p *planner) planEndpointChains(sp *servicePlan, pp *portPlan) {
	sticky := pp.svc.SessionAffinityType() == v1.ServiceAffinityClientIP
	for _, ep := range pp.reachable {
		n := endpointNames(pp.spn, ep)
		rules := []ruleSpec{{text: p.ipX + " saddr " + ep.IP().String() + " jump " + chainMarkMasq}}
		if sticky {
			rules = append(rules, ruleSpec{text: "update @" + n.affinity + " { " + p.ipX + " saddr }"})
		}
		rules = append(rules, ruleSpec{text: "meta l4proto " + pp.proto + " dnat to " + ep.String()})
		sp.addChain(chainSpec{name: n.chain, rules: rules})
	}
}
