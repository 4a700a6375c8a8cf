package winkerneltest

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
)

// MaxBackends is the most endpoints HNS accepts on one load balancer.
const MaxBackends = 1024

// FakeHNS is a stateful, in-memory HNS: networks, endpoints and load
// balancers with the checks real HNS makes where they matter to a proxy:
//
//   - a second LB with the same frontend VIP, protocol and external port
//     is refused with winkernel.ErrPortAlreadyExists;
//   - an LB naming an endpoint ID that does not exist, or more than
//     MaxBackends endpoints, is refused (winkernel.ErrInvalid);
//   - an LB with an IPv6 VIP or source VIP needs FlagIPv6, and an IPv4 one
//     must not have it (winkernel.ErrInvalid);
//   - UpdateLoadBalancer answers winkernel.ErrNotImplemented unless the
//     network's Features.ModifyLoadBalancer is set;
//   - deletes of unknown IDs answer winkernel.ErrNotFound.
//
// Every HNS method is counted and can be made to fail through the
// embedded proxytest.Faults (operations are named by method:
// "CreateLoadBalancer", "ListEndpoints", ...). LeakDeletes makes deletes
// report success but keep the object, and DeleteOutOfBand removes one
// behind the proxy's back. Safe for concurrent use.
type FakeHNS struct {
	proxytest.Faults

	mu        sync.Mutex
	networks  map[string]*winkernel.Network // by ID
	endpoints map[string]winkernel.Endpoint
	lbs       map[string]winkernel.LoadBalancer
	// keys indexes lbs by key (VIP, protocol, port); byIP endpoints by
	// network and address: HNS's uniqueness checks stay O(1) at scale.
	keys   map[winkernel.LBKey][]string
	byIP   map[netKey]string
	nextID int
	leaks  int
}

var _ winkernel.HNS = (*FakeHNS)(nil)

// NewFakeHNS returns an empty fake (no network).
func NewFakeHNS() *FakeHNS {
	return &FakeHNS{
		networks:  map[string]*winkernel.Network{},
		endpoints: map[string]winkernel.Endpoint{},
		lbs:       map[string]winkernel.LoadBalancer{},
		keys:      map[winkernel.LBKey][]string{},
		byIP:      map[netKey]string{},
	}
}

type netKey struct {
	network string
	ip      netip.Addr
}

// putLB stores lb, replacing the LB with its ID, and keeps the key index
// (a key may have several holders only through AddLoadBalancerOutOfBand).
func (f *FakeHNS) putLB(lb winkernel.LoadBalancer) {
	if old, ok := f.lbs[lb.ID]; ok {
		f.dropKeys(old)
	}
	f.lbs[lb.ID] = lb
	for _, k := range lbKeys(lb) {
		f.keys[k] = append(f.keys[k], lb.ID)
	}
}

func (f *FakeHNS) dropKeys(lb winkernel.LoadBalancer) {
	for _, k := range lbKeys(lb) {
		ids := slices.DeleteFunc(f.keys[k], func(id string) bool { return id == lb.ID })
		if len(ids) == 0 {
			delete(f.keys, k)
		} else {
			f.keys[k] = ids
		}
	}
}

func (f *FakeHNS) removeLB(id string) {
	if lb, ok := f.lbs[id]; ok {
		f.dropKeys(lb)
		delete(f.lbs, id)
	}
}

func (f *FakeHNS) putEndpoint(ep winkernel.Endpoint) {
	f.endpoints[ep.ID] = ep
	k := netKey{ep.NetworkID, ep.IP}
	if _, taken := f.byIP[k]; !taken {
		f.byIP[k] = ep.ID
	}
}

func (f *FakeHNS) removeEndpoint(id string) {
	if ep, ok := f.endpoints[id]; ok {
		delete(f.endpoints, id)
		if k := (netKey{ep.NetworkID, ep.IP}); f.byIP[k] == id {
			delete(f.byIP, k)
		}
	}
}

func (f *FakeHNS) newID(kind string) string {
	f.nextID++
	n := strconv.Itoa(f.nextID)
	if len(n) < 4 {
		n = "0000"[len(n):] + n
	}
	return kind + "-" + n
}

// AddNetwork adds n (an ID is made up when empty) and returns its ID.
func (f *FakeHNS) AddNetwork(n winkernel.Network) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n.ID == "" {
		n.ID = f.newID("net")
	}
	f.networks[n.ID] = &n
	return n.ID
}

// SetNetwork replaces the network with n's name (keeping its ID), as when
// the CNI adds a remote subnet; it reports whether one was found.
func (f *FakeHNS) SetNetwork(n winkernel.Network) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, old := range f.networks {
		if old.Name == n.Name {
			n.ID = id
			f.networks[id] = &n
			return true
		}
	}
	return false
}

// AddLocalEndpoint adds a host-local endpoint (as the CNI plugin does for
// a pod, or the root "cbr0" endpoint) on the named network; it returns the
// endpoint's ID.
func (f *FakeHNS) AddLocalEndpoint(network, name string, ip netip.Addr) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.networkByName(network)
	if n == nil {
		return "", fmt.Errorf("fake HNS: network %q: %w", network, winkernel.ErrNotFound)
	}
	ep := winkernel.Endpoint{ID: f.newID("ep"), Name: name, NetworkID: n.ID, IP: ip, MAC: "00-15-5d-00-00-00"}
	f.putEndpoint(ep)
	return ep.ID, nil
}

// RemoveEndpointOutOfBand deletes an endpoint without counting a call (a
// pod going away, or an operator).
func (f *FakeHNS) RemoveEndpointOutOfBand(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeEndpoint(id)
}

// DeleteOutOfBand deletes the load balancer with that ID behind the
// proxy's back (not counted); it reports whether there was one.
func (f *FakeHNS) DeleteOutOfBand(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.lbs[id]
	f.removeLB(id)
	return ok
}

// AddLoadBalancerOutOfBand adds an LB as another program would (no
// checks, not counted) and returns its ID.
func (f *FakeHNS) AddLoadBalancerOutOfBand(lb winkernel.LoadBalancer) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	lb.ID = f.newID("lb")
	f.putLB(cloneLB(lb))
	return lb.ID
}

// LeakDeletes makes the next n DeleteLoadBalancer and DeleteEndpoint
// calls report success but keep the object (an HNS that loses deletes).
func (f *FakeHNS) LeakDeletes(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaks = n
}

// LoadBalancers returns every LB, sorted by key.
func (f *FakeHNS) LoadBalancers() []winkernel.LoadBalancer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedLBs()
}

// Endpoints returns every endpoint, sorted by IP.
func (f *FakeHNS) Endpoints() []winkernel.Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedEndpoints()
}

func (f *FakeHNS) sortedLBs() []winkernel.LoadBalancer {
	out := make([]winkernel.LoadBalancer, 0, len(f.lbs))
	for _, lb := range f.lbs {
		out = append(out, cloneLB(lb))
	}
	sort.Slice(out, func(i, j int) bool { return lbLess(out[i], out[j]) })
	return out
}

func lbLess(a, b winkernel.LoadBalancer) bool {
	ka, kb := a.Key(), b.Key()
	if c := ka.VIP.Compare(kb.VIP); c != 0 {
		return c < 0
	}
	if ka.Port != kb.Port {
		return ka.Port < kb.Port
	}
	if ka.Protocol != kb.Protocol {
		return ka.Protocol < kb.Protocol
	}
	return a.ID < b.ID
}

func (f *FakeHNS) sortedEndpoints() []winkernel.Endpoint {
	out := make([]winkernel.Endpoint, 0, len(f.endpoints))
	for _, ep := range f.endpoints {
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].IP.Compare(out[j].IP); c != 0 {
			return c < 0
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func cloneLB(lb winkernel.LoadBalancer) winkernel.LoadBalancer {
	lb.FrontendVIPs = slices.Clone(lb.FrontendVIPs)
	lb.EndpointIDs = slices.Clone(lb.EndpointIDs)
	return lb
}

func (f *FakeHNS) networkByName(name string) *winkernel.Network {
	for _, n := range f.networks {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// GetNetworkByName implements winkernel.HNS.
func (f *FakeHNS) GetNetworkByName(name string) (*winkernel.Network, error) {
	if err := f.Hit("GetNetworkByName"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.networkByName(name)
	if n == nil {
		return nil, fmt.Errorf("fake HNS: network %q: %w", name, winkernel.ErrNotFound)
	}
	c := *n
	c.RemoteSubnets = slices.Clone(n.RemoteSubnets)
	return &c, nil
}

// ListEndpoints implements winkernel.HNS.
func (f *FakeHNS) ListEndpoints(networkID string) ([]winkernel.Endpoint, error) {
	if err := f.Hit("ListEndpoints"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.networks[networkID]; !ok && networkID != "" {
		return nil, fmt.Errorf("fake HNS: network %s: %w", networkID, winkernel.ErrNotFound)
	}
	// In no particular order, as HNS lists them; "" lists every network's.
	out := make([]winkernel.Endpoint, 0, len(f.endpoints))
	for _, ep := range f.endpoints {
		if ep.NetworkID == networkID || networkID == "" {
			out = append(out, ep)
		}
	}
	return out, nil
}

// CreateEndpoint implements winkernel.HNS.
func (f *FakeHNS) CreateEndpoint(networkID string, ep winkernel.Endpoint) (winkernel.Endpoint, error) {
	if err := f.Hit("CreateEndpoint"); err != nil {
		return winkernel.Endpoint{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.networks[networkID]
	if !ok {
		return winkernel.Endpoint{}, fmt.Errorf("fake HNS: network %s: %w", networkID, winkernel.ErrNotFound)
	}
	if !ep.IP.IsValid() {
		return winkernel.Endpoint{}, fmt.Errorf("fake HNS: endpoint without an IP: %w", winkernel.ErrInvalid)
	}
	if _, taken := f.byIP[netKey{networkID, ep.IP}]; taken {
		return winkernel.Endpoint{}, fmt.Errorf("fake HNS: endpoint %s already exists on %s: %w", ep.IP, n.Name, winkernel.ErrInvalid)
	}
	if !n.Type.IsOverlay() {
		ep.ProviderAddress = netip.Addr{}
	}
	ep.ID, ep.NetworkID = f.newID("ep"), networkID
	f.putEndpoint(ep)
	return ep, nil
}

// DeleteEndpoint implements winkernel.HNS.
func (f *FakeHNS) DeleteEndpoint(id string) error {
	if err := f.Hit("DeleteEndpoint"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.endpoints[id]; !ok {
		return fmt.Errorf("fake HNS: endpoint %s: %w", id, winkernel.ErrNotFound)
	}
	if f.leaks > 0 {
		f.leaks--
		return nil
	}
	f.removeEndpoint(id)
	return nil
}

// ListLoadBalancers implements winkernel.HNS.
func (f *FakeHNS) ListLoadBalancers() ([]winkernel.LoadBalancer, error) {
	if err := f.Hit("ListLoadBalancers"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]winkernel.LoadBalancer, 0, len(f.lbs))
	for _, lb := range f.lbs {
		out = append(out, cloneLB(lb))
	}
	return out, nil
}

// validate makes HNS's checks of lb; self is the ID being updated ("" on
// create).
func (f *FakeHNS) validate(lb winkernel.LoadBalancer, self string) error {
	if len(lb.EndpointIDs) == 0 {
		return fmt.Errorf("fake HNS: load balancer %s has no endpoints: %w", lb.Key(), winkernel.ErrInvalid)
	}
	if len(lb.EndpointIDs) > MaxBackends {
		return fmt.Errorf("fake HNS: load balancer %s has %d endpoints, more than %d: %w", lb.Key(), len(lb.EndpointIDs), MaxBackends, winkernel.ErrInvalid)
	}
	for _, id := range lb.EndpointIDs {
		if _, ok := f.endpoints[id]; !ok {
			return fmt.Errorf("fake HNS: load balancer %s: endpoint %s does not exist: %w", lb.Key(), id, winkernel.ErrInvalid)
		}
	}
	v6 := lb.Flags&winkernel.FlagIPv6 != 0
	for i := 0; i <= len(lb.FrontendVIPs); i++ {
		a := lb.SourceVIP
		if i < len(lb.FrontendVIPs) {
			a = lb.FrontendVIPs[i]
		} else if !a.IsValid() {
			break
		}
		if isV6 := a.Is6() && !a.Is4In6(); isV6 != v6 {
			return fmt.Errorf("fake HNS: load balancer %s: address %s with IPv6 flag %v: %w", lb.Key(), a, v6, winkernel.ErrInvalid)
		}
	}
	for _, k := range lbKeys(lb) {
		for _, id := range f.keys[k] {
			if id != self {
				return fmt.Errorf("fake HNS: load balancer %s (held by %s): %w", k, id, winkernel.ErrPortAlreadyExists)
			}
		}
	}
	return nil
}

func lbKeys(lb winkernel.LoadBalancer) []winkernel.LBKey {
	if len(lb.FrontendVIPs) == 0 {
		return []winkernel.LBKey{lb.Key()}
	}
	out := make([]winkernel.LBKey, len(lb.FrontendVIPs))
	for i, v := range lb.FrontendVIPs {
		out[i] = winkernel.LBKey{VIP: v, Protocol: lb.Protocol, Port: lb.ExternalPort, IPv6: lb.Flags&winkernel.FlagIPv6 != 0}
	}
	return out
}

// CreateLoadBalancer implements winkernel.HNS.
func (f *FakeHNS) CreateLoadBalancer(lb winkernel.LoadBalancer) (winkernel.LoadBalancer, error) {
	if err := f.Hit("CreateLoadBalancer"); err != nil {
		return winkernel.LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.validate(lb, ""); err != nil {
		return winkernel.LoadBalancer{}, err
	}
	lb = cloneLB(lb)
	lb.ID = f.newID("lb")
	f.putLB(lb)
	return cloneLB(lb), nil
}

// UpdateLoadBalancer implements winkernel.HNS.
func (f *FakeHNS) UpdateLoadBalancer(id string, lb winkernel.LoadBalancer) (winkernel.LoadBalancer, error) {
	if err := f.Hit("UpdateLoadBalancer"); err != nil {
		return winkernel.LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	supported := false
	for _, n := range f.networks {
		supported = supported || n.Features.ModifyLoadBalancer
	}
	if !supported {
		return winkernel.LoadBalancer{}, fmt.Errorf("fake HNS: update load balancer: %w", winkernel.ErrNotImplemented)
	}
	if _, ok := f.lbs[id]; !ok {
		return winkernel.LoadBalancer{}, fmt.Errorf("fake HNS: load balancer %s: %w", id, winkernel.ErrNotFound)
	}
	if err := f.validate(lb, id); err != nil {
		return winkernel.LoadBalancer{}, err
	}
	lb = cloneLB(lb)
	lb.ID = id
	f.putLB(lb)
	return cloneLB(lb), nil
}

// DeleteLoadBalancer implements winkernel.HNS.
func (f *FakeHNS) DeleteLoadBalancer(id string) error {
	if err := f.Hit("DeleteLoadBalancer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.lbs[id]; !ok {
		return fmt.Errorf("fake HNS: load balancer %s: %w", id, winkernel.ErrNotFound)
	}
	if f.leaks > 0 {
		f.leaks--
		return nil
	}
	f.removeLB(id)
	return nil
}

// Dump renders the fake's state as text, sorted, with endpoints named by
// address instead of ID so that it is stable across runs:
//
//	network vxlan0 Overlay remote 10.244.2.0/24 via 192.168.50.11
//	endpoint 10.244.1.2 local name=pod-a1
//	endpoint 10.244.2.2 remote pa=192.168.50.11 mac=02-11-0a-f4-02-02
//	lb 10.96.0.10:80/tcp -> 10.244.1.2:8080 10.244.2.2:8080 src=10.244.1.250 flags=none dist=none
//
// Networks come in the order they were added. A network's features and
// HNS version are written only when they differ from NewFakes' (every
// feature, version 15.0); an endpoint's network (net=) only when it is
// not the first network; a remote endpoint's name only when it is not the
// engine's (winkernel.RemoteEndpointNamePrefix and its address). Left
// out: IDs, local endpoints' MACs and provider addresses, remote subnets'
// isolation IDs and DR MACs. ParseDump reads this text back.
func (f *FakeHNS) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	nets := f.sortedNetworks()
	for _, n := range nets {
		fmt.Fprintf(&b, "network %s %s", n.Name, n.Type)
		for _, rs := range n.RemoteSubnets {
			fmt.Fprintf(&b, " remote %s via %s", rs.DestinationPrefix, rs.ProviderAddress)
		}
		if n.Features != defaultFeatures {
			fmt.Fprintf(&b, " features=%s", featuresString(n.Features))
		}
		if n.Version != defaultVersion {
			fmt.Fprintf(&b, " version=%d.%d", n.Version.Major, n.Version.Minor)
		}
		b.WriteByte('\n')
	}
	netSuffix := func(ep *winkernel.Endpoint) string {
		if len(nets) < 2 || ep.NetworkID == nets[0].ID {
			return ""
		}
		if n := f.networks[ep.NetworkID]; n != nil {
			return " net=" + n.Name
		}
		return " net-id=" + ep.NetworkID
	}
	for _, ep := range f.sortedEndpoints() {
		if ep.Remote {
			fmt.Fprintf(&b, "endpoint %s remote", ep.IP)
			if ep.ProviderAddress.IsValid() {
				fmt.Fprintf(&b, " pa=%s", ep.ProviderAddress)
			}
			fmt.Fprintf(&b, " mac=%s", ep.MAC)
			if ep.Name != winkernel.RemoteEndpointNamePrefix+ep.IP.String() {
				fmt.Fprintf(&b, " name=%s", ep.Name)
			}
		} else {
			fmt.Fprintf(&b, "endpoint %s local", ep.IP)
			if ep.Name != "" {
				fmt.Fprintf(&b, " name=%s", ep.Name)
			}
		}
		b.WriteString(netSuffix(&ep))
		b.WriteByte('\n')
	}
	for _, lb := range f.sortedLBs() {
		fmt.Fprintf(&b, "lb %s", lb.Key())
		if len(lb.FrontendVIPs) > 1 {
			fmt.Fprintf(&b, " vips=%v", lb.FrontendVIPs)
		}
		b.WriteString(" ->")
		var backends []string
		for _, id := range lb.EndpointIDs {
			if ep, ok := f.endpoints[id]; ok {
				backends = append(backends, netip.AddrPortFrom(ep.IP, lb.InternalPort).String())
			} else {
				backends = append(backends, id+"(missing)")
			}
		}
		sort.Strings(backends)
		for _, s := range backends {
			b.WriteString(" " + s)
		}
		src := "none"
		if lb.SourceVIP.IsValid() {
			src = lb.SourceVIP.String()
		}
		dist := "none"
		if lb.Distribution == winkernel.DistributionSourceIP {
			dist = "source-ip"
		} else if lb.Distribution != winkernel.DistributionNone {
			dist = fmt.Sprint(uint32(lb.Distribution))
		}
		fmt.Fprintf(&b, " src=%s flags=%s dist=%s\n", src, lb.Flags, dist)
	}
	return b.String()
}

// sortedNetworks returns the networks in the order they were added (by
// ID: made-up IDs count up).
func (f *FakeHNS) sortedNetworks() []*winkernel.Network {
	nets := make([]*winkernel.Network, 0, len(f.networks))
	for _, n := range f.networks {
		nets = append(nets, n)
	}
	sort.Slice(nets, func(i, j int) bool {
		if len(nets[i].ID) != len(nets[j].ID) {
			return len(nets[i].ID) < len(nets[j].ID)
		}
		return nets[i].ID < nets[j].ID
	})
	return nets
}
