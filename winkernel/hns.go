package winkernel

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// HNS is what the winkernel engine drives: the few Host Networking
// Service calls kube-proxy's Windows mode needs, in this package's own
// value types so that nothing portable imports the Windows-only hcn
// package. NewHNS returns the real implementation (Windows only);
// winkerneltest.FakeHNS is a stateful fake for every OS.
//
// Errors: implementations wrap ErrNotFound, ErrPortAlreadyExists and
// ErrNotImplemented (errors.Is) where HNS reports those conditions; nothing
// is retried inside an implementation.
type HNS interface {
	HNSReader
	// CreateEndpoint creates ep on the network: a remote endpoint when
	// ep.Remote (with ep.ProviderAddress on overlay networks), else a
	// host-local one. The returned value carries the new ID.
	CreateEndpoint(networkID string, ep Endpoint) (Endpoint, error)
	// DeleteEndpoint deletes the endpoint with that ID.
	DeleteEndpoint(id string) error
	// CreateLoadBalancer creates lb (its ID is ignored). HNS refuses a
	// second LB for the same frontend VIP, protocol and external port
	// (ErrPortAlreadyExists).
	CreateLoadBalancer(lb LoadBalancer) (LoadBalancer, error)
	// UpdateLoadBalancer replaces the LB with that ID by lb in place.
	// Hosts without the ModifyLoadBalancer feature answer
	// ErrNotImplemented.
	UpdateLoadBalancer(id string, lb LoadBalancer) (LoadBalancer, error)
	// DeleteLoadBalancer deletes the LB with that ID.
	DeleteLoadBalancer(id string) error
}

// HNSReader is the read-only part of HNS: what ListState reads.
type HNSReader interface {
	// GetNetworkByName returns the named HNS network (ErrNotFound if none).
	GetNetworkByName(name string) (*Network, error)
	// ListEndpoints returns every endpoint of the network with that ID,
	// or of every network when networkID is empty (then also endpoints
	// whose address cannot be read, with their ID and no IP).
	ListEndpoints(networkID string) ([]Endpoint, error)
	// ListLoadBalancers returns every load balancer on the host, whoever
	// created it.
	ListLoadBalancers() ([]LoadBalancer, error)
}

// State is the HNS state the engine works from: its network, the
// network's endpoints and every load balancer on the host.
type State struct {
	Network       *Network
	Endpoints     []Endpoint
	LoadBalancers []LoadBalancer
}

// ListState lists the HNS state of the network named network: the
// network, its endpoints and every load balancer on the host, whoever
// made it. It is the one listing of HNS state: full syncs and Cleanup
// read HNS through it, and winkerneltest.NewFakesFromHNS copies a node's
// HNS into the fake with it.
func ListState(h HNSReader, network string) (State, error) {
	n, eps, err := listNetwork(h, network)
	if err != nil {
		return State{}, err
	}
	lbs, err := h.ListLoadBalancers()
	if err != nil {
		return State{}, fmt.Errorf("listing HNS load balancers: %w", err)
	}
	return State{Network: n, Endpoints: eps, LoadBalancers: lbs}, nil
}

// listNetwork lists the network named name and its endpoints: ListState
// without the load balancers, for the dry run.
func listNetwork(h HNSReader, name string) (*Network, []Endpoint, error) {
	n, err := h.GetNetworkByName(name)
	if err != nil {
		return nil, nil, fmt.Errorf("HNS network %q: %w", name, err)
	}
	eps, err := h.ListEndpoints(n.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("listing HNS endpoints: %w", err)
	}
	return n, eps, nil
}

// Sentinel errors of HNS implementations (wrapped; use errors.Is).
var (
	// ErrNotFound: the network, endpoint or load balancer does not exist.
	ErrNotFound = errors.New("HNS object not found")
	// ErrPortAlreadyExists: another LB already holds this frontend VIP,
	// protocol and port (HNS's HCN_E_PORT_ALREADY_EXISTS).
	ErrPortAlreadyExists = errors.New("HNS port already exists")
	// ErrNotImplemented: this HNS version cannot do the operation (E_NOTIMPL).
	ErrNotImplemented = errors.New("HNS operation not implemented")
	// ErrNotSupported is returned by NewHNS on systems other than Windows.
	ErrNotSupported = errors.New("HNS is only available on Windows")
	// ErrInvalid: HNS rejected the object's contents (too many backends,
	// an IPv6 address without the IPv6 flag, an unknown endpoint ID...).
	ErrInvalid = errors.New("HNS rejected an invalid object")
	// ErrNetworkNotFound: the network does not exist; errors.Is also
	// matches ErrNotFound.
	ErrNetworkNotFound = errors.New("HNS network not found")
	// ErrInvalidIP: HNS rejected an IP address (HCN_E_INVALID_IP);
	// errors.Is also matches ErrInvalid.
	ErrInvalidIP = errors.New("HNS rejected an invalid IP address")
)

// NetworkType is an HNS network's mode.
type NetworkType string

// The network types the engine supports (HNS spells them this way).
const (
	NetworkOverlay  NetworkType = "Overlay"
	NetworkL2Bridge NetworkType = "L2Bridge"
)

// IsOverlay compares case-insensitively, as HNS versions differ in case.
func (t NetworkType) IsOverlay() bool { return strings.EqualFold(string(t), string(NetworkOverlay)) }

// RemoteSubnet is an overlay network's route to another node's pod subnet
// (HNS's RemoteSubnetRoute network policy).
type RemoteSubnet struct {
	DestinationPrefix netip.Prefix
	IsolationID       uint16
	// ProviderAddress is the remote node's address on the underlay.
	ProviderAddress netip.Addr
	DRMACAddress    string
}

// Features are the HNS capabilities the engine looks at.
type Features struct {
	DSR, SessionAffinity, IPv6DualStack, ModifyLoadBalancer, RemoteSubnet bool
}

// Version is the HNS API version.
type Version struct{ Major, Minor int }

// Network is an HNS network, with the host's features and HNS version.
type Network struct {
	ID            string
	Name          string
	Type          NetworkType
	RemoteSubnets []RemoteSubnet
	Features      Features
	Version       Version
}

// ProviderAddressFor returns the provider address of the remote subnet
// holding ip (or whose provider address is ip), if any.
func (n *Network) ProviderAddressFor(ip netip.Addr) (netip.Addr, bool) {
	for _, rs := range n.RemoteSubnets {
		if rs.DestinationPrefix.Contains(ip) || rs.ProviderAddress == ip {
			return rs.ProviderAddress, true
		}
	}
	return netip.Addr{}, false
}

// Endpoint is an HNS endpoint: a host-local one (a pod's, created by the
// CNI plugin, or the overlay source-VIP endpoint) or a remote one that
// stands for an address on another node.
type Endpoint struct {
	ID        string
	Name      string
	NetworkID string
	IP        netip.Addr
	MAC       string
	// ProviderAddress is the underlay address of the node that holds a
	// remote endpoint (overlay only).
	ProviderAddress netip.Addr
	Remote          bool
}

// LBFlags are a load balancer's settings: HNS's LoadBalancerFlags and
// LoadBalancerPortMappingFlags in one set.
type LBFlags uint32

// The load-balancer flags.
const (
	// FlagDSR: direct server return, the backend answers the client directly.
	FlagDSR LBFlags = 1 << iota
	// FlagIPv6: an IPv6 load balancer (HNS requires it for IPv6 VIPs).
	FlagIPv6
	// FlagILB: internal load balancing.
	FlagILB
	// FlagLocalRoutedVIP: the VIP is reachable from the host itself.
	FlagLocalRoutedVIP
	// FlagUseMux: DSR for node-port access of the VIP.
	FlagUseMux
	// FlagPreserveDIP: the backend sees the VIP as destination.
	FlagPreserveDIP
	// FlagVipExternalIP: the VIP is an external address (node port,
	// external IP, load-balancer ingress).
	FlagVipExternalIP
)

var flagNames = []struct {
	f    LBFlags
	name string
}{
	{FlagDSR, "dsr"}, {FlagIPv6, "ipv6"}, {FlagILB, "ilb"}, {FlagLocalRoutedVIP, "local-routed-vip"},
	{FlagUseMux, "use-mux"}, {FlagPreserveDIP, "preserve-dip"}, {FlagVipExternalIP, "vip-external-ip"},
}

func (f LBFlags) String() string {
	var parts []string
	for _, n := range flagNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// Distribution is how an LB spreads clients over its backends.
type Distribution uint32

// The distributions the engine uses.
const (
	// DistributionNone balances each connection on its own.
	DistributionNone Distribution = 0
	// DistributionSourceIP keeps a client IP on one backend (ClientIP
	// session affinity). HNS's value 2.
	DistributionSourceIP Distribution = 2
)

// Protocol numbers as HNS takes them.
const (
	ProtocolTCP  uint16 = 6
	ProtocolUDP  uint16 = 17
	ProtocolSCTP uint16 = 132
)

// LoadBalancer is an HNS load balancer with one port mapping (the only
// shape kube-proxy creates).
type LoadBalancer struct {
	ID string
	// FrontendVIPs: the VIP (cluster IP, external IP, ingress IP); empty
	// for a node-port LB, which answers on every host address.
	FrontendVIPs []netip.Addr
	// SourceVIP is the address backends see when the LB SNATs.
	SourceVIP    netip.Addr
	Protocol     uint16
	InternalPort uint16
	ExternalPort uint16
	// EndpointIDs are the backends' HNS endpoint IDs.
	EndpointIDs  []string
	Flags        LBFlags
	Distribution Distribution
}

// VIP is the first frontend VIP, or the zero Addr for a node-port LB.
func (lb *LoadBalancer) VIP() netip.Addr {
	if len(lb.FrontendVIPs) == 0 {
		return netip.Addr{}
	}
	return lb.FrontendVIPs[0]
}

// LBKey identifies an LB as HNS does when it refuses duplicates: frontend
// VIP (zero for node ports), protocol and external port.
type LBKey struct {
	VIP      netip.Addr
	Protocol uint16
	Port     uint16
	// IPv6 is the LB's FlagIPv6: on a dual-stack node the IPv4 and IPv6
	// node-port LBs of a port both have no VIP, and are two LBs (as
	// kube-proxy v1.37 keys them, kubernetes#136373).
	IPv6 bool
}

func (k LBKey) String() string {
	if !k.VIP.IsValid() {
		return fmt.Sprintf("*:%d/%s", k.Port, protoName(k.Protocol))
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.VIP, k.Port), protoName(k.Protocol))
}

// Key returns the LB's key (of its first frontend VIP).
func (lb *LoadBalancer) Key() LBKey {
	return LBKey{VIP: lb.VIP(), Protocol: lb.Protocol, Port: lb.ExternalPort, IPv6: lb.Flags&FlagIPv6 != 0}
}

func protoName(p uint16) string {
	switch p {
	case ProtocolTCP:
		return "tcp"
	case ProtocolUDP:
		return "udp"
	case ProtocolSCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto-%d", p)
}
