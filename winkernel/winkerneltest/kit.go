package winkerneltest

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
)

// NetworkName is the HNS network NewFakes creates.
const NetworkName = "vxlan0"

// Fakes are the fakes a winkernel Proxier drives (the kit vocabulary).
type Fakes struct {
	HNS *FakeHNS
	// Family is the IP family the fakes were made for.
	Family v1.IPFamily
}

// NewFakes returns a fake HNS holding one overlay network, NetworkName,
// with every feature the engine looks at (DSR, session affinity, IPv6
// dual stack, remote subnets, load-balancer updates) and no endpoints.
// Tests add remote subnets with SetNetwork and pods with AddPod.
func NewFakes(family v1.IPFamily) *Fakes {
	f := &Fakes{HNS: NewFakeHNS(), Family: family}
	f.HNS.AddNetwork(winkernel.Network{Name: NetworkName, Type: winkernel.NetworkOverlay, Features: defaultFeatures, Version: defaultVersion})
	return f
}

// The features and HNS version of NewFakes' network (and of the networks
// ParseDump reads without features= or version=).
var (
	defaultFeatures = winkernel.Features{DSR: true, SessionAffinity: true, IPv6DualStack: true, ModifyLoadBalancer: true, RemoteSubnet: true}
	defaultVersion  = winkernel.Version{Major: 15, Minor: 0}
)

// NewFakesFromDump returns fakes holding the state dump describes, in
// the form FakeHNS.Dump writes (see FakeHNS.ParseDump): for tests that
// start from a given HNS, say a node after an earlier run.
func NewFakesFromDump(family v1.IPFamily, dump string) (*Fakes, error) {
	f := &Fakes{HNS: NewFakeHNS(), Family: family}
	if err := f.HNS.ParseDump(dump); err != nil {
		return nil, err
	}
	return f, nil
}

// NewFakesFromHNS returns fakes holding a copy of the HNS state of the
// network named network, read from h (a node's HNS: winkernel.NewHNS) with
// winkernel.ListState: for tracing or testing against what a node holds.
// See NewFakesFromState for what is copied and the notes returned.
func NewFakesFromHNS(family v1.IPFamily, h winkernel.HNSReader, network string) (*Fakes, []string, error) {
	s, err := winkernel.ListState(h, network)
	if err != nil {
		return nil, nil, err
	}
	return NewFakesFromState(family, s)
}

// NewFakesFromState returns fakes holding s: the network, its endpoints
// (under new IDs, the load balancers' references mapped to them) and every
// load balancer. A load balancer's reference to an endpoint that is not
// in s.Endpoints (one on another network) is left out, with a note saying
// so.
func NewFakesFromState(family v1.IPFamily, s winkernel.State) (*Fakes, []string, error) {
	if s.Network == nil {
		return nil, nil, fmt.Errorf("winkerneltest: a state without a network")
	}
	n := s.Network
	f := &Fakes{HNS: NewFakeHNS(), Family: family}
	f.HNS.AddNetwork(*n)
	ids := map[string]string{}
	for _, ep := range s.Endpoints {
		var id string
		if ep.Remote {
			made, err := f.HNS.CreateEndpoint(n.ID, ep)
			if err != nil {
				return nil, nil, fmt.Errorf("loading remote endpoint %s: %w", ep.IP, err)
			}
			id = made.ID
		} else {
			var err error
			if id, err = f.HNS.AddLocalEndpoint(n.Name, ep.Name, ep.IP); err != nil {
				return nil, nil, fmt.Errorf("loading endpoint %s: %w", ep.IP, err)
			}
		}
		ids[ep.ID] = id
	}
	var notes []string
	for _, lb := range s.LoadBalancers {
		refs := lb.EndpointIDs
		lb.EndpointIDs = nil
		for _, id := range refs {
			if mapped, ok := ids[id]; ok {
				lb.EndpointIDs = append(lb.EndpointIDs, mapped)
			} else {
				notes = append(notes, fmt.Sprintf("load balancer %s names endpoint %s, not on network %s: left out", lb.Key(), id, n.Name))
			}
		}
		f.HNS.AddLoadBalancerOutOfBand(lb)
	}
	return f, notes, nil
}

// Interfaces returns the fakes as a winkernel.Interfaces.
func (f *Fakes) Interfaces() winkernel.Interfaces { return winkernel.Interfaces{HNS: f.HNS} }

// Dump renders every fake's state (see FakeHNS.Dump).
func (f *Fakes) Dump() string { return f.HNS.Dump() }

// AddPod adds a host-local endpoint for a pod on this node, as the CNI
// plugin does, on NetworkName.
func (f *Fakes) AddPod(name string, ip netip.Addr) string {
	id, err := f.HNS.AddLocalEndpoint(NetworkName, name, ip)
	if err != nil {
		panic(err) // NetworkName always exists
	}
	return id
}

// SetNetwork changes NetworkName's type and remote subnets (features and
// version are kept).
func (f *Fakes) SetNetwork(typ winkernel.NetworkType, subnets ...winkernel.RemoteSubnet) {
	n, err := f.HNS.GetNetworkByName(NetworkName)
	if err != nil {
		panic(err)
	}
	n.Type, n.RemoteSubnets = typ, slices.Clone(subnets)
	f.HNS.SetNetwork(*n)
}

// SetFeatures changes the features NetworkName reports.
func (f *Fakes) SetFeatures(features winkernel.Features) {
	n, err := f.HNS.GetNetworkByName(NetworkName)
	if err != nil {
		panic(err)
	}
	n.Features = features
	f.HNS.SetNetwork(*n)
}

// TracerConfig describes the node around the fake HNS.
type TracerConfig struct {
	// NodeIPs are the host's addresses: node-port LBs (no frontend VIP)
	// answer on them.
	NodeIPs []netip.Addr
}

// Tracer answers where a packet goes under the load balancers the fake
// HNS holds. It implements proxytest.Tracer.
//
// The model: a load balancer matches on frontend VIP (or, for node-port
// LBs, any of NodeIPs), protocol and port; the packet may reach any of its
// endpoints at the internal port. It is masqueraded (SNAT to the LB's
// source VIP) unless the LB is DSR or the packet comes from a pod to a
// cluster IP (HNS's virtual filtering platform rewrites only the
// destination of pod-to-service traffic). ClientIP affinity is
// source-IP distribution. A packet no LB matches is not proxied: HNS has
// no reject and no drop of its own, so a service address without a load
// balancer is simply an address no host owns (lost in routing), and a
// node port without one reaches the host's own stack.
type Tracer struct {
	f   *Fakes
	cfg TracerConfig
}

var _ proxytest.Tracer = (*Tracer)(nil)

// NewTracer returns a tracer over f.
func NewTracer(f *Fakes, cfg TracerConfig) *Tracer { return &Tracer{f: f, cfg: cfg} }

// Dump is the fakes' state (the conformance runner logs it on failures).
func (t *Tracer) Dump() string { return t.f.Dump() }

// Trace implements proxytest.Tracer.
func (t *Tracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	proto := winkernel.ProtocolTCP
	switch p.Protocol {
	case v1.ProtocolUDP:
		proto = winkernel.ProtocolUDP
	case v1.ProtocolSCTP:
		proto = winkernel.ProtocolSCTP
	}
	dst := p.Dst.Unmap()
	lbs := t.f.HNS.LoadBalancers()
	var match *winkernel.LoadBalancer
	for i := range lbs {
		lb := &lbs[i]
		for _, k := range lbKeys(*lb) {
			if k.Protocol != proto || int(k.Port) != p.Port {
				continue
			}
			if k.VIP == dst || (!k.VIP.IsValid() && slices.Contains(t.cfg.NodeIPs, dst)) {
				match = lb
			}
		}
	}
	if match == nil {
		return proxytest.Result{Verdict: proxytest.NotProxied}, nil
	}
	byID := map[string]winkernel.Endpoint{}
	for _, ep := range t.f.HNS.Endpoints() {
		byID[ep.ID] = ep
	}
	res := proxytest.Result{Verdict: proxytest.Forwarded, Sticky: match.Distribution == winkernel.DistributionSourceIP}
	for _, id := range match.EndpointIDs {
		ep, ok := byID[id]
		if !ok {
			return proxytest.Result{}, fmt.Errorf("load balancer %s names endpoint %s, which does not exist", match.Key(), id)
		}
		res.Backends = append(res.Backends, netip.AddrPortFrom(ep.IP, match.InternalPort))
	}
	slices.SortFunc(res.Backends, func(a, b netip.AddrPort) int { return a.Compare(b) })
	clusterIP := match.Flags&winkernel.FlagVipExternalIP == 0
	switch {
	case match.Flags&winkernel.FlagDSR != 0:
	case p.Origin == proxytest.FromPod && clusterIP:
	default:
		res.Masquerade = true
	}
	return res, nil
}
