package userspace

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planExternalIPs makes each external IP reach the set
// externalTrafficPolicy names (see externalDst for pods and the node):
// redirects (CaptureIPTables) or sockets bound at it (CaptureBind).
func (b *planner) planExternalIPs(svc proxy.ServicePort) {
	for _, ip := range svc.ExternalIPs() {
		ip = ip.Unmap()
		switch b.pp.capture {
		case CaptureIPTables:
			b.externalDst(ChainPortalsContainer, ChainPortalsHost, ip, int(b.port), nil)
		case CaptureBind:
			b.fixedSocket(b.externalKey, netip.AddrPortFrom(ip, b.port))
		}
	}
}
