package ipvs

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// servicePlan is everything one service port puts on the node: pure data,
// computed by planService with no I/O.
type servicePlan struct {
	vss     []plannedVS
	addrs   []netip.Addr // bound to kube-ipvs0
	entries []setEntry
}

// plannedVS is one virtual server with its real servers (all weight 1).
type plannedVS struct {
	vs  VirtualServer
	rss []netip.AddrPort
}

// setEntry is one member of one of our sets.
type setEntry struct {
	set   string
	entry Entry
}

// setNames are the family's names of our sets.
type setNames struct {
	loopBack, clusterIP, externalIP, externalIPLocal          string
	lb, lbLocal, lbFW, lbSourceIP, lbSourceCIDR               string
	npTCP, npLocalTCP, npUDP, npLocalUDP, npSCTP, npLocalSCTP string
	healthCheck, ipvsIPs                                      string
}

func newSetNames(f v1.IPFamily) setNames {
	n := func(s string) string { return SetName(f, s) }
	return setNames{
		loopBack: n(SetLoopBack), clusterIP: n(SetClusterIP), externalIP: n(SetExternalIP), externalIPLocal: n(SetExternalIPLocal),
		lb: n(SetLoadBalancer), lbLocal: n(SetLoadBalancerLocal), lbFW: n(SetLoadBalancerFW),
		lbSourceIP: n(SetLoadBalancerSourceIP), lbSourceCIDR: n(SetLoadBalancerSourceCIDR),
		npTCP: n(SetNodePortTCP), npLocalTCP: n(SetNodePortLocalTCP), npUDP: n(SetNodePortUDP), npLocalUDP: n(SetNodePortLocalUDP),
		npSCTP: n(SetNodePortSCTP), npLocalSCTP: n(SetNodePortLocalSCTP),
		healthCheck: n(SetHealthCheckNodePort), ipvsIPs: n(SetIPVSIPs),
	}
}

// planInput is what planService needs besides the service port itself.
type planInput struct {
	family        v1.IPFamily
	nodeName      string
	nodeLabels    map[string]string
	nodePortAddrs []netip.Addr
	scheduler     string
	sets          setNames
	// badScheduler is called for a service whose annotation names an
	// unknown scheduler (the default is used).
	badScheduler func(spn proxy.ServicePortName, value string)
	// scratch is where planService builds a plan before copying it out at
	// its exact size (plans are kept: growing each by append left a third
	// of a cold start's planning allocations as garbage or slack)
	scratch servicePlan
}

// planService computes the virtual servers, addresses and set entries of
// one service port. It is pure: same input, same plan.
func planService(in *planInput, spn proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint) *servicePlan {
	p := &servicePlan{}
	if !svc.ClusterIP().IsValid() {
		return p // headless or of the other family: nothing to do
	}
	cluster, local, _, _ := proxy.CategorizeEndpointsShared(eps, svc, in.nodeName, in.nodeLabels)
	internal := cluster
	if svc.InternalPolicyLocal() {
		internal = local
	}
	external := cluster
	if svc.ExternalPolicyLocal() {
		external = local
	}
	base := in.virtualServerTemplate(spn, svc)
	b := &in.scratch
	b.vss, b.addrs, b.entries = b.vss[:0], b.addrs[:0], b.entries[:0]
	planClusterIP(in, b, svc, base, internal, eps)
	planExternalIPs(in, b, svc, base, external)
	planLoadBalancer(in, b, svc, base, external)
	planNodePort(in, b, svc, base, external)
	p.vss, p.addrs, p.entries = exact(b.vss), exact(b.addrs), exact(b.entries)
	return p
}

// exact copies s into a slice of its length (nil when empty).
func exact[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

// realServers turns endpoints into sorted, de-duplicated real servers of the family.
func realServers(family v1.IPFamily, eps []proxy.Endpoint) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(eps))
	for _, ep := range eps {
		ip := ep.IP().Unmap()
		if !ip.IsValid() || ip.Is4() != (family == v1.IPv4Protocol) || ep.Port() <= 0 || ep.Port() > 65535 {
			continue
		}
		out = append(out, netip.AddrPortFrom(ip, uint16(ep.Port())))
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

func (p *servicePlan) addVS(base VirtualServer, addr netip.Addr, port int, rss []netip.AddrPort) {
	if !addr.IsValid() || port <= 0 || port > 65535 {
		return
	}
	vs := base
	vs.Address = addr
	vs.Port = uint16(port)
	p.vss = append(p.vss, plannedVS{vs: vs, rss: rss})
}

func (p *servicePlan) add(set string, e Entry) {
	p.entries = append(p.entries, setEntry{set: set, entry: e})
}

func (p *servicePlan) bind(addr netip.Addr) {
	if !slices.Contains(p.addrs, addr) {
		p.addrs = append(p.addrs, addr)
	}
}
