package winkernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Proxier is kube-proxy's Windows "kernelspace" mode on the engine base:
// Services as HNS load balancers. Its exported methods are the base's.
type Proxier struct {
	*engine.Base
	cfg Config
	hns HNS
	log logr.Logger
	st  state
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier returns a winkernel proxier for cfg driving ifs.HNS. It does
// not touch HNS: the network is looked up by the first sync (and a missing
// network fails that sync, which Run retries).
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	if ifs.HNS == nil {
		return nil, errors.New("winkernel: Interfaces.HNS is required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxier{cfg: cfg, hns: ifs.HNS, log: cfg.Logger.WithName("winkernel")}
	p.st.reset()
	base, err := engine.New(cfg.Common, engine.Hooks{
		Name:    "winkernel",
		Apply:   p.apply,
		DryRun:  p.dryRun,
		Drifted: p.drifted,
		Cleanup: p.cleanup,
	})
	if err != nil {
		return nil, err
	}
	p.Base = base
	return p, nil
}

// appliedLB is a load balancer this engine holds in HNS.
type appliedLB struct {
	lb    LoadBalancer // as HNS holds it (ID set)
	owner proxy.ServicePortName
	owned bool // owner is set (adopted LBs have none until planned)
	// kind is what the LB serves, once planned (adopted LBs have none
	// until then); it labels the failure metrics.
	kind lbKind
}

// state is what the engine believes HNS holds, rebuilt from HNS's
// listing on every full sync.
type state struct {
	network *Network
	// endpoints of our network by address, from the last listing plus
	// what we created since.
	endpoints map[netip.Addr]endpointRef
	// lbs are our load balancers by key.
	lbs map[LBKey]*appliedLB
	// services are, by service, the ports in the tracker's map and what
	// each was given.
	services map[types.NamespacedName][]portState
	// remoteRefs counts the service ports that use each remote endpoint.
	remoteRefs map[netip.Addr]int
	// referenced are remote endpoints this process used that are not
	// named as ours (RemoteEndpointNamePrefix): ours to delete too.
	referenced map[netip.Addr]bool
	// rootIP is the address of the root endpoint (RootHNSEndpointName).
	rootIP netip.Addr
	// remotesHeld counts the remote endpoints in remoteRefs (-1: to be
	// counted again, after a sync), for the drift check.
	remotesHeld int
	// updateOff: HNS answered "not implemented" to an update.
	updateOff bool
	synced    bool
}

// portState is what one service port was given: the keys of its LBs and
// the remote endpoints it holds a reference on.
type portState struct {
	name    proxy.ServicePortName
	keys    []LBKey
	remotes []netip.Addr
}

func (s *state) reset() {
	*s = state{
		endpoints:   map[netip.Addr]endpointRef{},
		lbs:         map[LBKey]*appliedLB{},
		services:    map[types.NamespacedName][]portState{},
		remoteRefs:  map[netip.Addr]int{},
		referenced:  map[netip.Addr]bool{},
		remotesHeld: -1,
		updateOff:   s.updateOff,
	}
}

// refreshed starts a full sync's view: the network as listed, no LB yet
// (refresh adds the listed ones), the remote endpoints we used kept.
func (s *state) refreshed(n *Network) {
	referenced := s.referenced
	s.reset()
	s.network, s.referenced = n, referenced
}

// portState returns what the service port was given (zero if nothing).
func (s *state) portState(name proxy.ServicePortName) portState {
	for _, ps := range s.services[name.NamespacedName] {
		if ps.name == name {
			return ps
		}
	}
	return portState{}
}

// setPorts records what the sync's service ports (sorted) hold now: on a
// full sync they are every port, else they replace their services' ports.
// Ports no longer in the tracker's map are dropped.
func (s *state) setPorts(full bool, items []scoped, held []portState) {
	if full {
		s.services = make(map[types.NamespacedName][]portState, len(s.services))
	}
	buf := make([]portState, 0, len(items)) // one backing array
	for i := 0; i < len(items); {
		ns := items[i].name.NamespacedName
		first := len(buf)
		for ; i < len(items) && items[i].name.NamespacedName == ns; i++ {
			if items[i].present {
				buf = append(buf, held[i])
			}
		}
		ports := buf[first:len(buf):len(buf)]
		if len(ports) > 0 {
			s.services[ns] = ports
		} else {
			delete(s.services, ns)
		}
	}
}

// env builds the plan environment from the configuration, the node and
// the network.
func (p *Proxier) env(nodeLabels map[string]string) *planEnv {
	nodeIP := p.cfg.NodeIP()
	env := &planEnv{
		ipv6:        p.cfg.IPFamily == v1.IPv6Protocol,
		nodeName:    p.cfg.NodeName,
		nodeLabels:  nodeLabels,
		nodeIP:      nodeIP,
		sourceVIP:   p.cfg.SourceVIP,
		hostMAC:     p.cfg.HostMAC,
		network:     p.st.network,
		enableDSR:   p.cfg.EnableDSR,
		healthzPort: p.cfg.HealthzPort,
	}
	if n := p.st.network; n != nil {
		env.overlay = n.Type.IsOverlay()
		env.dsr = n.Features.DSR
	}
	if !env.sourceVIP.IsValid() {
		env.sourceVIP = nodeIP
	}
	if p.cfg.ForwardHealthCheckVIP {
		env.rootIP = p.st.rootIP
	}
	return env
}

// ownership is what the ownership rule looks at besides the LB itself.
type ownership struct {
	// network are the IDs of our network's endpoints.
	network map[string]struct{}
	// sourceVIPOnNetwork: Config.SourceVIP is the address of a local
	// endpoint of our overlay network (the source-VIP endpoint) and not a
	// node IP, so it is no other network's.
	sourceVIPOnNetwork bool
	// anywhere lists the IDs of every network's endpoints (once, on first
	// use); nil when the listing failed.
	anywhere func() map[string]struct{}
}

// ownership builds the rule's inputs from a listing of our network's
// endpoints.
func (p *Proxier) ownership(n *Network, eps []Endpoint) *ownership {
	o := &ownership{network: make(map[string]struct{}, len(eps))}
	for i := range eps {
		o.network[eps[i].ID] = struct{}{}
	}
	vip := p.cfg.SourceVIP
	if n != nil && n.Type.IsOverlay() && vip.IsValid() && !slices.Contains(p.cfg.NodeIPs, vip) {
		for i := range eps {
			if eps[i].IP == vip && !eps[i].Remote {
				o.sourceVIPOnNetwork = true
				break
			}
		}
	}
	var all map[string]struct{}
	listed := false
	o.anywhere = func() map[string]struct{} {
		if !listed {
			listed = true
			list, err := p.hns.ListEndpoints("")
			if err != nil {
				p.log.Error(err, "Listing every network's HNS endpoints; keeping load balancers whose endpoints are gone")
				return nil
			}
			all = make(map[string]struct{}, len(list))
			for i := range list {
				all[list[i].ID] = struct{}{}
			}
		}
		return all
	}
	return o
}

// ownsLB is the ownership rule: an LB found in HNS is this engine's
//
//  1. when it holds the key of an LB we plan (see attribute), or when we
//     created or adopted it in this process;
//  2. when its source VIP is ours (Config.SourceVIP or the node IP) and
//     at least one endpoint it names is on our network;
//  3. when its source VIP is Config.SourceVIP, that address is our overlay
//     network's source-VIP endpoint (not a node IP), and no endpoint it
//     names exists on any network any more: an LB of ours from an earlier
//     run whose backends are all gone. Another network's proxy SNATs to
//     its own network's address, and an LB of another network with our
//     source VIP still names endpoints that exist (rule 3 lists every
//     network's endpoints, once, to see that).
//
// Not recognised: an LB whose source VIP is the node IP (l2bridge, or an
// overlay LB with a backend outside the remote subnets) once its
// endpoints are all gone, as every network's proxy on the node may use
// that address. Every other LB (another network's proxy, another
// program) is never updated or deleted.
func (p *Proxier) ownsLB(lb *LoadBalancer, o *ownership) bool {
	if a := p.st.lbs[lb.Key()]; a != nil && a.lb.ID == lb.ID {
		return true
	}
	src := lb.SourceVIP
	if src != p.cfg.SourceVIP && src != p.cfg.NodeIP() {
		return false
	}
	for _, id := range lb.EndpointIDs {
		if _, ok := o.network[id]; ok {
			return true
		}
	}
	if src != p.cfg.SourceVIP || !o.sourceVIPOnNetwork {
		return false
	}
	all := o.anywhere()
	if all == nil {
		return false
	}
	for _, id := range lb.EndpointIDs {
		if _, ok := all[id]; ok {
			return false // on another network
		}
	}
	return true
}

func joinErrs(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more errors", len(errs)-10))
	}
	return errors.Join(errs...)
}

// drifted is Hooks.Drifted: one listing of the load balancers and one of
// our network's endpoints, and drift when one of our LBs, one of the
// remote endpoints our LBs use, or the overlay source-VIP endpoint is
// gone (deleted behind our back; the full sync it triggers recreates
// them). Cost: the two listings, one map look-up per listed LB, per
// remote endpoint we use and per listed remote endpoint.
func (p *Proxier) drifted(context.Context) (bool, error) {
	if !p.st.synced {
		return false, nil
	}
	list, err := p.hns.ListLoadBalancers()
	if err != nil {
		return false, err
	}
	found := 0
	for i := range list {
		if a := p.st.lbs[list[i].Key()]; a != nil && a.lb.ID == list[i].ID {
			found++
		}
	}
	if found < len(p.st.lbs) {
		return true, nil
	}
	if p.st.network == nil {
		return false, nil
	}
	eps, err := p.hns.ListEndpoints(p.st.network.ID)
	if err != nil {
		return false, err
	}
	// Every remote endpoint we hold a reference on, by ID; and the source
	// VIP endpoint, which the LBs SNAT to.
	if p.st.remotesHeld < 0 {
		p.st.remotesHeld = 0
		for ip := range p.st.remoteRefs {
			if ep, ok := p.st.endpoints[ip]; ok && ep.Remote {
				p.st.remotesHeld++ // (a local endpoint with the address serves as well)
			}
		}
	}
	want := p.st.remotesHeld
	srcID, srcFound := "", false
	if p.st.network.Type.IsOverlay() && p.cfg.SourceVIP.IsValid() {
		if ep, ok := p.st.endpoints[p.cfg.SourceVIP]; ok {
			srcID = ep.ID
		}
	}
	found, srcFound = 0, srcID == ""
	for i := range eps {
		ep := &eps[i]
		if ep.ID == srcID {
			srcFound = true
		}
		if !ep.Remote || p.st.remoteRefs[ep.IP] == 0 {
			continue
		}
		if held, ok := p.st.endpoints[ep.IP]; ok && held.ID == ep.ID {
			found++
		}
	}
	return found < want || !srcFound, nil
}
