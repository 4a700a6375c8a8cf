package iptables

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy"
)

// ConntrackFilter selects UDP conntrack entries (every set field must match).
type ConntrackFilter = conntrack.Filter

// ConntrackCleaner deletes UDP conntrack entries in batches.
type ConntrackCleaner interface {
	DeleteUDP(ipv6 bool, filters []ConntrackFilter) (uint, error)
}

// NewConntrackCleaner returns the netlink cleaner for the calling thread's
// network namespace (ErrNotSupported off Linux).
func NewConntrackCleaner() ConntrackCleaner { return conntrack.New() }

// staleUDPFilters turns one update's UDP results into conntrack filters:
//   - a UDP cluster IP that went away: its entries;
//   - a UDP service that went from no endpoints to some: entries to its
//     addresses and node port (the client's traffic was being rejected and
//     the rejection may be cached as a conntrack entry);
//   - a UDP endpoint that went away: entries DNATed to it, per service address.
func staleUDPFilters(u *changetracker.Update, dst []ConntrackFilter) []ConntrackFilter {
	for ip := range u.ServiceResult.DeletedUDPClusterIPs {
		dst = append(dst, ConntrackFilter{OrigDst: ip})
	}
	for _, name := range u.EndpointsResult.NewlyActiveUDPServices {
		svc, ok := u.Services[name]
		if !ok || svc.Protocol() != v1.ProtocolUDP {
			continue
		}
		forEachServiceAddr(svc, func(ip netip.Addr) {
			dst = append(dst, ConntrackFilter{OrigDst: ip, OrigDstPort: svc.Port()})
		})
		if np := svc.NodePort(); np != 0 {
			dst = append(dst, ConntrackFilter{OrigDstPort: np})
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
			dst = append(dst, ConntrackFilter{OrigDst: ip, ReplySrc: ep})
		})
		if np := svc.NodePort(); np != 0 {
			dst = append(dst, ConntrackFilter{OrigDstPort: np, ReplySrc: ep})
		}
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
