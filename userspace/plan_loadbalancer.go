package userspace

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy"
)

// planLoadBalancer makes each load-balancer IP reach the set
// externalTrafficPolicy names, as external IPs do; with
// loadBalancerSourceRanges (CaptureIPTables) only those sources are
// redirected and other sources' traffic to the IP is dropped. CaptureBind
// binds the IPs and cannot filter sources.
func (b *planner) planLoadBalancer(svc proxy.ServicePort) {
	vips := svc.LoadBalancerVIPs()
	if len(vips) == 0 {
		return
	}
	var ranges []netip.Prefix
	if b.pp.capture == CaptureIPTables {
		for _, r := range svc.LoadBalancerSourceRanges() {
			if r.IsValid() && r.Addr().Is6() == b.pp.listen.Is6() {
				ranges = append(ranges, r.Masked())
			}
		}
	}
	for _, ip := range vips {
		b.externalAddr(ip.Unmap(), ranges)
	}
}
