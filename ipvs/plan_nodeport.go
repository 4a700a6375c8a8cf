package ipvs

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// planNodePort: a virtual server on every node-port address (these are the
// node's own addresses: not bound to kube-ipvs0). The port goes into
// KUBE-NODE-PORT-{TCP,UDP} (bitmap:port; SCTP uses a hash:ip,port set per
// address), plus the -LOCAL- set with externalTrafficPolicy Local, which
// keeps the client address. A health-check node port goes into
// KUBE-HEALTH-CHECK-NODE-PORT so the filter table accepts it.
func planNodePort(in *planInput, p *servicePlan, svc proxy.ServicePort, base VirtualServer, external []proxy.Endpoint) {
	np := svc.NodePort()
	if np > 0 && np <= 65535 {
		rss := realServers(in.family, external)
		for _, addr := range in.nodePortAddrs {
			p.addVS(base, addr, np, rss)
		}
		local := svc.ExternalPolicyLocal()
		switch svc.Protocol() {
		case v1.ProtocolTCP:
			p.add(in.sets.npTCP, Entry{Port: uint16(np)})
			if local {
				p.add(in.sets.npLocalTCP, Entry{Port: uint16(np)})
			}
		case v1.ProtocolUDP:
			p.add(in.sets.npUDP, Entry{Port: uint16(np)})
			if local {
				p.add(in.sets.npLocalUDP, Entry{Port: uint16(np)})
			}
		case v1.ProtocolSCTP:
			for _, addr := range in.nodePortAddrs {
				e := Entry{IP: addr, Protocol: v1.ProtocolSCTP, Port: uint16(np)}
				p.add(in.sets.npSCTP, e)
				if local {
					p.add(in.sets.npLocalSCTP, e)
				}
			}
		}
	}
	if hc := svc.HealthCheckNodePort(); hc > 0 && hc <= 65535 {
		p.add(in.sets.healthCheck, Entry{Port: uint16(hc)})
	}
}
