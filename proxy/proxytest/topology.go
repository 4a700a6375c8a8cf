package proxytest

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// Pod is one pod of the conformance topology: a backend (and sometimes a
// client) with an address inside the cluster CIDR.
type Pod struct {
	// Name is the pod name; real-kernel servers answer with it.
	Name string
	// IP is the pod's address.
	IP netip.Addr
	// Node is the node the EndpointSlices place the pod on.
	Node string
	// Zone is the endpoint's zone (topology.kubernetes.io/zone of Node).
	Zone string
	// HostInterface is the name of the node-side interface that leads to
	// the pod (the node end of its veth pair), for tracers that match on
	// input/output interfaces.
	HostInterface string
}

// Topology is the one node (plus its surroundings) every conformance
// scenario is written against. The addresses are the same for every
// engine; the real-kernel harness (internal/netnstest) builds exactly this.
//
// Engines under test must be configured for it: node name NodeName, node IP
// NodeIP, local traffic detected by ClusterCIDR, no service-proxy-name,
// NodePorts accepted on NodeIP, and no masquerade-all unless
// Options.MasqueradeAll.
type Topology struct {
	// Family is the IP family of every address below.
	Family v1.IPFamily

	// NodeName is the proxier's node ("node-a"); RemoteNodeName is the
	// other node endpoints may live on ("node-b").
	NodeName       string
	RemoteNodeName string
	// Zone and RemoteZone are the zones of the two nodes.
	Zone       string
	RemoteZone string

	// NodeIP is the node's primary address (on its uplinks). NodePorts
	// are reached on it.
	NodeIP netip.Addr
	// PodGateway is the node's address on the pod-facing interfaces; it
	// is the source pods see when the node masquerades traffic to them.
	PodGateway netip.Addr
	// ClusterCIDR holds every pod address (local detector for masquerading).
	ClusterCIDR netip.Prefix
	// ServiceCIDR holds every cluster IP the scenarios use.
	ServiceCIDR netip.Prefix
	// ExternalIPRange holds the spec.externalIPs the scenarios use.
	ExternalIPRange netip.Prefix
	// LoadBalancerRange holds the load-balancer ingress IPs the scenarios use.
	LoadBalancerRange netip.Prefix

	// LocalPods run on NodeName; RemotePods are labelled as on RemoteNodeName.
	LocalPods  []Pod
	RemotePods []Pod
	// ClientPod is a pod on NodeName that the scenarios use as the client
	// of FromPod packets; it is a backend only in the hairpin scenario.
	ClientPod Pod

	// ExternalClient and ExternalClient2 are hosts outside the cluster
	// whose traffic arrives on the node's uplinks (FromExternal). Source
	// range scenarios allow the first and block the second.
	ExternalClient  netip.Addr
	ExternalClient2 netip.Addr
	// UplinkInterface and Uplink2Interface are the node's interfaces
	// towards ExternalClient and ExternalClient2.
	UplinkInterface  string
	Uplink2Interface string
	// WorldInterface is the node's default-route interface; traffic that
	// is not proxied to a service address leaves through it.
	WorldInterface string
	// World is the address of the node's default gateway.
	World netip.Addr

	// ServerPorts are the ports every pod listens on (TCP and UDP) in the
	// real-kernel harness; every targetPort and service port of every
	// scenario is one of them.
	ServerPorts []int
}

// DefaultTopology returns the conformance topology for family (IPv4 or IPv6).
// It panics on any other family.
func DefaultTopology(family v1.IPFamily) Topology {
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	t := Topology{
		Family:           family,
		NodeName:         "node-a",
		RemoteNodeName:   "node-b",
		Zone:             "zone-a",
		RemoteZone:       "zone-b",
		UplinkInterface:  "ext1",
		Uplink2Interface: "ext2",
		WorldInterface:   "world",
		ServerPorts:      []int{80, 81, 82, 53, 8080, 8081, 5353},
	}
	var local, remote []netip.Addr
	var client netip.Addr
	switch family {
	case v1.IPv4Protocol:
		t.NodeIP = a("192.168.50.10")
		t.PodGateway = a("10.244.1.1")
		t.ClusterCIDR = p("10.244.0.0/16")
		t.ServiceCIDR = p("10.96.0.0/16")
		t.ExternalIPRange = p("198.51.100.0/24")
		t.LoadBalancerRange = p("192.0.2.0/24")
		t.ExternalClient = a("203.0.113.10")
		t.ExternalClient2 = a("203.0.113.20")
		t.World = a("198.18.0.1")
		local = []netip.Addr{a("10.244.1.2"), a("10.244.1.3")}
		client = a("10.244.1.9")
		remote = []netip.Addr{a("10.244.2.2"), a("10.244.2.3")}
	case v1.IPv6Protocol:
		t.NodeIP = a("fd00:50::10")
		t.PodGateway = a("fd00:10:244:1::1")
		t.ClusterCIDR = p("fd00:10:244::/48")
		t.ServiceCIDR = p("fd00:10:96::/112")
		t.ExternalIPRange = p("2001:db8:51::/64")
		t.LoadBalancerRange = p("2001:db8:2::/64")
		t.ExternalClient = a("2001:db8:113::10")
		t.ExternalClient2 = a("2001:db8:113::20")
		t.World = a("fd00:18::1")
		local = []netip.Addr{a("fd00:10:244:1::2"), a("fd00:10:244:1::3")}
		client = a("fd00:10:244:1::9")
		remote = []netip.Addr{a("fd00:10:244:2::2"), a("fd00:10:244:2::3")}
	default:
		panic(fmt.Sprintf("proxytest: unknown IP family %q", family))
	}
	for i, ip := range local {
		name := fmt.Sprintf("pod-a%d", i+1)
		t.LocalPods = append(t.LocalPods, Pod{Name: name, IP: ip, Node: t.NodeName, Zone: t.Zone, HostInterface: "veth-" + name})
	}
	for i, ip := range remote {
		name := fmt.Sprintf("pod-b%d", i+1)
		t.RemotePods = append(t.RemotePods, Pod{Name: name, IP: ip, Node: t.RemoteNodeName, Zone: t.RemoteZone, HostInterface: "veth-" + name})
	}
	t.ClientPod = Pod{Name: "client", IP: client, Node: t.NodeName, Zone: t.Zone, HostInterface: "veth-client"}
	return t
}

// Pods returns every pod: LocalPods, RemotePods, then ClientPod.
func (t Topology) Pods() []Pod {
	out := make([]Pod, 0, len(t.LocalPods)+len(t.RemotePods)+1)
	out = append(out, t.LocalPods...)
	out = append(out, t.RemotePods...)
	return append(out, t.ClientPod)
}

// PodByIP finds the pod with address ip.
func (t Topology) PodByIP(ip netip.Addr) (Pod, bool) {
	for _, p := range t.Pods() {
		if p.IP == ip.Unmap() {
			return p, true
		}
	}
	return Pod{}, false
}

// PodByName finds the pod called name.
func (t Topology) PodByName(name string) (Pod, bool) {
	for _, p := range t.Pods() {
		if p.Name == name {
			return p, true
		}
	}
	return Pod{}, false
}

// ServiceIP returns the n-th address (n ≥ 1) of the service CIDR.
func (t Topology) ServiceIP(n int) netip.Addr { return nth(t.ServiceCIDR, n) }

// ExternalIP returns the n-th address (n ≥ 1) of the external-IP range.
func (t Topology) ExternalIP(n int) netip.Addr { return nth(t.ExternalIPRange, n) }

// LoadBalancerIP returns the n-th address (n ≥ 1) of the load-balancer range.
func (t Topology) LoadBalancerIP(n int) netip.Addr { return nth(t.LoadBalancerRange, n) }

func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	for i := 0; i < n; i++ {
		a = a.Next()
	}
	if !p.Contains(a) {
		panic(fmt.Sprintf("proxytest: address %d is outside %s", n, p))
	}
	return a
}

// HostPrefix returns ip as a single-address prefix (/32 or /128).
func HostPrefix(ip netip.Addr) netip.Prefix {
	return netip.PrefixFrom(ip, ip.BitLen())
}
