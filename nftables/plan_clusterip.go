//go:build linux

package nftables

// planClusterIP: the cluster IP joins the cluster-ips set (unknown ports of
// it are rejected), and dispatches through service-ips to the internal
// policy chain, or is rejected (no endpoints) or dropped (iTP Local without
// local endpoints) through no-endpoint-services.
func (p *planner) planClusterIP(sp *servicePlan, pp *portPlan) {
	ip := pp.svc.ClusterIP()
	if !ip.IsValid() {
		return
	}
	sp.addElem(ctrClusterIPs, addrKey(ip), verdict{}, "")
	key := pp.key(ip)
	if pp.hasInternal {
		sp.addElem(ctrServiceIPs, key, gotoVerdict(pp.internalChain), "")
	} else {
		sp.addElem(ctrNoEndpointServices, key, pp.internalVerdict, svcComment(pp.spn))
	}
}
