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
	sp.addElem(setClusterIPs, ip.String(), "", "")
	key := join3(ip.String(), pp.proto, pp.port)
	if pp.hasInternal {
		sp.addElem(mapServiceIPs, key, "goto "+pp.internalChain, "")
	} else {
		sp.addElem(mapNoEndpointServices, key, pp.internalVerdict, svcComment(pp.spn))
	}
}
