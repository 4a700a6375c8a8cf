package ipvs

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planClusterIP: one virtual server on the cluster IP (bound to
// kube-ipvs0) with the endpoints internal traffic may use; the cluster IP
// and port go into KUBE-CLUSTER-IP (for masquerading), and every local
// endpoint into KUBE-LOOP-BACK so a pod reaching itself through the service
// is masqueraded (hairpin).
func planClusterIP(in *planInput, p *servicePlan, svc proxy.ServicePort, base VirtualServer, internal, all []proxy.Endpoint) {
	ip := svc.ClusterIP()
	p.addVS(base, ip, svc.Port(), realServers(in.family, internal))
	p.bind(ip)
	p.add(in.sets.clusterIP, Entry{IP: ip, Protocol: svc.Protocol(), Port: uint16(svc.Port())})
	p.add(in.sets.ipvsIPs, Entry{IP: ip})
	for _, ep := range all {
		if !ep.IsLocal() {
			continue
		}
		epIP := ep.IP().Unmap()
		if !epIP.IsValid() || epIP.Is4() != ip.Is4() || ep.Port() <= 0 || ep.Port() > 65535 {
			continue
		}
		p.add(in.sets.loopBack, Entry{IP: epIP, Protocol: svc.Protocol(), Port: uint16(ep.Port()), IP2: epIP})
	}
}

// planExternalIPs: a virtual server per external IP (bound to kube-ipvs0,
// in KUBE-EXTERNAL-IP for masquerading; with externalTrafficPolicy Local
// also in KUBE-EXTERNAL-IP-LOCAL, which keeps the client address).
func planExternalIPs(in *planInput, p *servicePlan, svc proxy.ServicePort, base VirtualServer, external []proxy.Endpoint) {
	if len(svc.ExternalIPs()) == 0 {
		return
	}
	rss := realServers(in.family, external)
	for _, ip := range svc.ExternalIPs() {
		if !sameFamily(ip, svc.ClusterIP()) {
			continue
		}
		p.addVS(base, ip, svc.Port(), rss)
		p.bind(ip)
		e := Entry{IP: ip, Protocol: svc.Protocol(), Port: uint16(svc.Port())}
		if svc.ExternalPolicyLocal() {
			p.add(in.sets.externalIPLocal, e)
		} else {
			p.add(in.sets.externalIP, e)
		}
		p.add(in.sets.ipvsIPs, Entry{IP: ip})
	}
}

func sameFamily(a, b netip.Addr) bool { return a.IsValid() && b.IsValid() && a.Is4() == b.Is4() }
