//go:build linux

package nftables

// planExternalIPs: spec.externalIPs dispatch to the service's external
// chain; with no endpoints usable by external traffic they are rejected
// (none at all) or dropped (eTP Local, none on this node) once the
// external chain's short-circuits for pods and the node did not catch them.
func (p *planner) planExternalIPs(sp *servicePlan, pp *portPlan) {
	for _, ip := range pp.svc.ExternalIPs() {
		key := pp.key(ip)
		if pp.hasEndpoints {
			sp.addElem(ctrServiceIPs, key, gotoVerdict(pp.names.externalChain()), "")
		}
		if !pp.hasExternal {
			sp.addElem(ctrNoEndpointServices, key, pp.externalVerdict, svcComment(pp.spn))
		}
	}
}
