package userspace

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planClusterIP makes the cluster IP reach the set internalTrafficPolicy
// names: a redirect from pods and from the node (CaptureIPTables), or a
// socket bound at it (CaptureBind).
func (b *planner) planClusterIP(svc proxy.ServicePort) {
	ip := svc.ClusterIP()
	if !ip.IsValid() || ip.IsUnspecified() {
		return // headless, or none of this family
	}
	ip = ip.Unmap()
	switch b.pp.capture {
	case CaptureIPTables:
		b.nat(ChainPortalsContainer, netip.Prefix{}, ip, int(b.port), b.internalKey)
		b.nat(ChainPortalsHost, netip.Prefix{}, ip, int(b.port), b.internalKey)
	case CaptureBind:
		b.fixedSocket(b.internalKey, netip.AddrPortFrom(ip, b.port))
	}
}
