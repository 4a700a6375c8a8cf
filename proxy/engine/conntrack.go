package engine

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
)

// StaleUDPFilters appends to dst the conntrack filters for one update's UDP
// results, as kube-proxy clears them:
//   - a UDP cluster IP that went away: its entries;
//   - a UDP service port that went from no serving endpoints to some:
//     entries to its addresses and node port (the client's earlier
//     datagrams were rejected or dropped, and that verdict may be cached in
//     a conntrack entry);
//   - a UDP endpoint that went away: entries DNATed to it, per service
//     address and node port;
//   - a UDP service port that went away (its service deleted, or the port
//     dropped): every entry to its frontends (cluster, external and
//     load-balancer IPs) at its port, as kube-proxy v1.38 (kubernetes#141371)
//     does; not its node port, which a filter can only match by port number
//     (kube-proxy leaves it too). Without it a one-way UDP sender to an
//     external or load-balancer IP keeps refreshing an entry DNATed to the
//     old endpoint, whose IP may belong to another pod by then.
//
// A UDP service port left with no serving endpoint loses the entries DNATed
// to each endpoint that stopped serving (the third case), which is what
// kube-proxy v1.37 (kubernetes#139629) restored for its reconciler.
//
// The base calls it on every sync; engines only add filters of their own
// through Result.Conntrack.
func StaleUDPFilters(u *changetracker.Update, dst []conntrack.Filter) []conntrack.Filter {
	for ip := range u.ServiceResult.DeletedUDPClusterIPs {
		dst = append(dst, conntrack.Filter{OrigDst: ip})
	}
	for _, name := range u.EndpointsResult.NewlyActiveUDPServices {
		svc, ok := u.Services[name]
		if !ok || svc.Protocol() != v1.ProtocolUDP {
			continue
		}
		forEachServiceAddr(svc, func(ip netip.Addr) {
			dst = append(dst, conntrack.Filter{OrigDst: ip, OrigDstPort: svc.Port()})
		})
		if np := svc.NodePort(); np != 0 {
			dst = append(dst, conntrack.Filter{OrigDstPort: np})
		}
	}
	for _, se := range u.EndpointsResult.DeletedUDPEndpoints {
		svc, ok := u.Services[se.ServicePortName]
		if !ok || svc.Protocol() != v1.ProtocolUDP {
			continue
		}
		ap, err := netip.ParseAddrPort(se.Endpoint)
		if err != nil {
			continue
		}
		ep := ap.Addr()
		forEachServiceAddr(svc, func(ip netip.Addr) {
			dst = append(dst, conntrack.Filter{OrigDst: ip, ReplySrc: ep})
		})
		if np := svc.NodePort(); np != 0 {
			dst = append(dst, conntrack.Filter{OrigDstPort: np, ReplySrc: ep})
		}
	}
	for _, svc := range u.ServiceResult.DeletedUDPServicePorts {
		forEachServiceAddr(svc, func(ip netip.Addr) {
			dst = append(dst, conntrack.Filter{OrigDst: ip, OrigDstPort: svc.Port()})
		})
	}
	return dst
}

func forEachServiceAddr(svc proxy.ServicePort, fn func(netip.Addr)) {
	if ip := svc.ClusterIP(); ip.IsValid() {
		fn(ip)
	}
	for _, ip := range svc.ExternalIPs() {
		fn(ip)
	}
	for _, ip := range svc.LoadBalancerVIPs() {
		fn(ip)
	}
}
