//go:build linux

package nftables

// planNodePort: the node port dispatches (through service-nodeports, on
// the node-port addresses) to the external chain; not subject to
// loadBalancerSourceRanges, as upstream.
func (p *planner) planNodePort(sp *servicePlan, pp *portPlan) {
	np := pp.svc.NodePort()
	if np == 0 {
		return
	}
	key := protoPortKey(pp.protoNum, uint16(np))
	if pp.hasEndpoints {
		sp.addElem(ctrServiceNodePorts, key, gotoVerdict(pp.names.externalChain()), "")
	}
	if !pp.hasExternal {
		sp.addElem(ctrNoEndpointNodePorts, key, pp.externalVerdict, svcComment(pp.spn))
	}
}

// planExternalChain writes the chain every external destination (node
// port, external IP, load-balancer IP) of the port jumps to: masquerade
// and go to the cluster policy chain under eTP Cluster; under eTP Local,
// short-circuit pods and the node itself to the cluster chain (the node
// masqueraded) and send the rest to the local chain, if any.
func (p *planner) planExternalChain(sp *servicePlan, pp *portPlan) {
	if !pp.usesExternalChain {
		return
	}
	var rules []ruleSpec
	if !pp.svc.ExternalPolicyLocal() {
		rules = append(rules, p.markMasqRule(matchNone, "masquerade"))
	} else {
		if r, ok := p.localMatchRule(); ok && pp.clusterChain != "" {
			r.stmt = stmtGoto
			r.ext().chain, r.x.comment = pp.clusterChain, "short-circuit pod traffic"
			rules = append(rules, r)
		}
		rules = append(rules, p.markMasqRule(matchFibLocal, "masquerade local traffic"))
		if pp.clusterChain != "" {
			rules = append(rules, ruleSpec{match: matchFibLocal, stmt: stmtGoto, x: &ruleExt{chain: pp.clusterChain, comment: "short-circuit local traffic"}})
		}
	}
	if pp.hasExternal {
		policy := pp.clusterChain
		if pp.svc.ExternalPolicyLocal() {
			policy = pp.localChain
		}
		if policy != "" {
			rules = append(rules, gotoRule(0, policy))
		}
	}
	sp.addChain(chainSpec{name: pp.names.externalChain(), rules: rules})
}
