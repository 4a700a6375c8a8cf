//go:build linux

package nftables

import (
	"strconv"
	"strings"

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
		var b strings.Builder
		b.WriteString("numgen random mod ")
		b.WriteString(strconv.Itoa(len(c.eps)))
		b.WriteString(" vmap {")
		for i, ep := range c.eps {
			if i > 0 {
				b.WriteString(" ,")
			}
			b.WriteString(" ")
			b.WriteString(strconv.Itoa(i))
			b.WriteString(" : goto ")
			b.WriteString(endpointNames(pp.spn, ep).chain)
		}
		b.WriteString(" }")
		rules = append(rules, ruleSpec{text: b.String()})
		sp.addChain(chainSpec{name: c.name, rules: rules})
	}
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
