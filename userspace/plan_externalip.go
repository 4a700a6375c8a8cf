package userspace

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planExternalIPs makes each external IP reach the set
// externalTrafficPolicy names (see externalDst for pods and the node).
func (b *planner) planExternalIPs(svc proxy.ServicePort) {
	for _, ip := range svc.ExternalIPs() {
		b.externalAddr(ip.Unmap(), nil)
	}
}

// externalAddr makes ip at the service port (an external or load-balancer
// IP) reach the external set: redirects for the sources in ranges (all
// when none) in CaptureIPTables mode, a socket bound at it in CaptureBind
// mode (which cannot filter sources).
func (b *planner) externalAddr(ip netip.Addr, ranges []netip.Prefix) {
	switch b.pp.capture {
	case CaptureIPTables:
		b.externalDst(ChainPortalsContainer, ChainPortalsHost, ip, int(b.port), ranges)
	case CaptureBind:
		b.fixedSocket(b.externalKey, netip.AddrPortFrom(ip, b.port))
	}
}
