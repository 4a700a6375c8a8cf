//go:build linux

package nftables

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// epNames are the names of an endpoint's chain and affinity set, which
// only services with ClientIP affinity write: computed when planned, not
// hashed and kept for every endpoint of every service.
type epNames struct{ chain, affinity string }

func endpointNames(spn proxy.ServicePortName, ep proxy.Endpoint) epNames {
	base := endpointNameBase(spn, ep.String())
	return epNames{chain: prefixEndpointChain + base, affinity: prefixAffinitySet + base}
}

// planPolicyChains writes the cluster and local policy chains. Without
// session affinity, as upstream v1.37, a policy chain DNATs straight to
// its endpoints (no endpoint chains): one endpoint is a plain "dnat to";
// several are picked at random (dnatRules). With ClientIP affinity the
// chain first sends clients with a recorded endpoint to that endpoint's
// chain, then picks an endpoint chain at random (dispatchRules).
func (p *planner) planPolicyChains(sp *servicePlan, pp *portPlan) {
	sticky := pp.svc.SessionAffinityType() == v1.ServiceAffinityClientIP
	for _, c := range []struct {
		name string
		eps  []proxy.Endpoint
	}{{pp.clusterChain, pp.clusterEndpoints}, {pp.localChain, pp.localEndpoints}} {
		if c.name == "" {
			continue
		}
		var rules []ruleSpec
		if sticky {
			rules = make([]ruleSpec, 0, 2*len(c.eps))
			for _, ep := range c.eps {
				n := endpointNames(pp.spn, ep)
				rules = append(rules, ruleSpec{match: matchSaddrSet, stmt: stmtGoto, v6: p.v6(), x: &ruleExt{set: n.affinity, chain: n.chain}})
			}
			rules = append(rules, dispatchRules(pp.spn, c.eps)...)
		} else if r, ok := p.endpointSlot(c.name, protoNum(pp.proto), len(c.eps)); ok {
			rules = append(p.ruleBuf(1), dnatMapRule(len(c.eps), protoNum(pp.proto), p.v6(), r))
			sp.eps = slices.Grow(sp.eps, len(c.eps))
			for i, ep := range c.eps {
				sp.eps = append(sp.eps, epElem{idx: r.offset() + uint32(i), m: r.m, ep: makeEpVal(epAddrPort(ep))})
			}
		} else {
			rules = dnatRules(p.ruleBuf(len(c.eps)), protoNum(pp.proto), c.eps)
		}
		sp.addChain(chainSpec{name: c.name, rules: rules})
	}
}

// endpointSlot is the endpoint-map slot of a policy chain of n endpoints
// (endpoint_maps.go); false: one rule per endpoint (one endpoint, more
// than a slot holds, no free slot, no slots).
func (p *planner) endpointSlot(chain string, proto uint8, n int) (slotRef, bool) {
	if p.slots == nil || n < 2 || n > maxMapEndpoints {
		return slotRef{}, false
	}
	return p.slots.get(chain, proto)
}

// numgenStep is the modulus of the numgen match of rule i of n picking one
// of n choices at random ("numgen random mod N-i 0"): rule i matches with
// probability 1/(n-i) (the last always), so each choice is taken with
// probability 1/n, as kube-proxy's iptables mode does with statistic
// matches. 0 (no match) for the last.
func numgenStep(i, n int) int {
	if left := n - i; left > 1 {
		return left
	}
	return 0
}

// dnatRules DNAT to one of eps at random, one rule per endpoint
// ("numgen random mod N-i 0 meta l4proto P dnat to EP", the last without
// the numgen match), where upstream v1.37 writes one rule with an inline
// map ("dnat ip addr . port to numgen random mod N map { 0 : A . p, … }").
// Every inline map is an anonymous set in the kernel, which names a new
// one by scanning every set of the table (nf_tables_set_alloc_name, a
// sscanf per set): with one per service a cold start is quadratic in the
// number of services (measured in doc.go and BENCHMARKS.md). One endpoint
// is a plain "dnat to", as upstream writes it.
// The rules are appended to rules (ruleBuf's, room for len(eps)).
func dnatRules(rules []ruleSpec, proto uint8, eps []proxy.Endpoint) []ruleSpec {
	for i, ep := range eps {
		rules = append(rules, dnatRule(numgenStep(i, len(eps)), proto, epAddrPort(ep)))
	}
	return rules
}

// dispatchRules pick one of eps's endpoint chains at random (numgenStep),
// where upstream writes one "numgen random mod N vmap { 0 : goto A, … }"
// (an anonymous set as dnatRules explains). Tables left by upstream are
// adopted all the same: their chains carry no content hash, so the first
// full sync rewrites them.
func dispatchRules(spn proxy.ServicePortName, eps []proxy.Endpoint) []ruleSpec {
	rules := make([]ruleSpec, 0, len(eps))
	for i, ep := range eps {
		rules = append(rules, gotoRule(numgenStep(i, len(eps)), endpointNames(spn, ep).chain))
	}
	return rules
}

// epAddrPort is ep's address and port.
func epAddrPort(ep proxy.Endpoint) netip.AddrPort {
	return netip.AddrPortFrom(ep.IP(), uint16(ep.Port()))
}

// planEndpointChains writes, for a service with ClientIP affinity, one
// chain per reachable endpoint: record the client in the endpoint's
// affinity set, DNAT. Every service lists its local endpoints in
// hairpin-connections (masquerading an endpoint that reaches itself
// through the service), as upstream v1.37.
func (p *planner) planEndpointChains(sp *servicePlan, pp *portPlan) {
	sticky := pp.svc.SessionAffinityType() == v1.ServiceAffinityClientIP
	for _, ep := range pp.reachable {
		if ep.IsLocal() {
			key := hairpinKey(ep.IP(), pp.protoNum, uint16(ep.Port()))
			if !sp.hasElem(ctrHairpin, key) {
				sp.addElem(ctrHairpin, key, verdict{}, "")
			}
		}
		if !sticky {
			continue
		}
		n := endpointNames(pp.spn, ep)
		sp.addChain(chainSpec{name: n.chain, rules: []ruleSpec{
			{stmt: stmtUpdate, v6: p.v6(), x: &ruleExt{set: n.affinity}},
			dnatRule(0, protoNum(pp.proto), epAddrPort(ep)),
		}})
	}
}
