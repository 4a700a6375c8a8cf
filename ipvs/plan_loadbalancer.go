package ipvs

import (
	"github.com/svcproxy/svcproxy/proxy"
)

// planLoadBalancer: a virtual server per load-balancer ingress IP (bound to
// kube-ipvs0). KUBE-LOAD-BALANCER lists them all (masqueraded unless also in
// KUBE-LOAD-BALANCER-LOCAL, for externalTrafficPolicy Local). With
// loadBalancerSourceRanges the VIP goes into KUBE-LOAD-BALANCER-FW and each
// range into KUBE-LOAD-BALANCER-SOURCE-CIDR; the filter table then drops
// other sources. A VIP inside its own ranges is also allowed as a source
// (KUBE-LOAD-BALANCER-SOURCE-IP), for hairpin traffic.
func planLoadBalancer(in *planInput, p *servicePlan, svc proxy.ServicePort, base VirtualServer, external []proxy.Endpoint) {
	if len(svc.LoadBalancerVIPs()) == 0 {
		return
	}
	rss := realServers(in.family, external)
	port := uint16(svc.Port())
	for _, ip := range svc.LoadBalancerVIPs() {
		if !sameFamily(ip, svc.ClusterIP()) {
			continue
		}
		p.addVS(base, ip, svc.Port(), rss)
		p.bind(ip)
		e := Entry{IP: ip, Protocol: svc.Protocol(), Port: port}
		p.add(in.sets.lb, e)
		p.add(in.sets.ipvsIPs, Entry{IP: ip})
		if svc.ExternalPolicyLocal() {
			p.add(in.sets.lbLocal, e)
		}
		ranges := svc.LoadBalancerSourceRanges()
		if len(ranges) == 0 {
			continue
		}
		p.add(in.sets.lbFW, e)
		self := false
		for _, r := range ranges {
			if r.Addr().Is4() != ip.Is4() {
				continue
			}
			p.add(in.sets.lbSourceCIDR, Entry{IP: ip, Protocol: svc.Protocol(), Port: port, Net: r.Masked()})
			if r.Contains(ip) {
				self = true
			}
		}
		if self {
			p.add(in.sets.lbSourceIP, Entry{IP: ip, Protocol: svc.Protocol(), Port: port, IP2: ip})
		}
	}
}
