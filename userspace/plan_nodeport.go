package userspace

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planNodePort makes the node port reach the set externalTrafficPolicy
// names: redirects of any local destination (CaptureIPTables; the jump
// into the node-port chains matches addrtype LOCAL), or a socket bound at
// ListenAddress and the node port (the other modes).
func (b *planner) planNodePort(svc proxy.ServicePort) {
	np := svc.NodePort()
	if np <= 0 || np > 65535 {
		return
	}
	if b.pp.capture == CaptureIPTables {
		b.externalDst(ChainNodePortContainer, ChainNodePortHost, netip.Addr{}, np, nil)
		return
	}
	b.fixedSocket(b.externalKey, netip.AddrPortFrom(b.pp.listen, uint16(np)))
}
