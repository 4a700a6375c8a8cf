package proxy

import (
	"fmt"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ServicePortName names one port of one Service: namespace/name plus the
// port's name (empty for a single unnamed port) and its protocol.
// It is the key of ServicePortMap and EndpointsMap.
type ServicePortName struct {
	types.NamespacedName
	Port     string
	Protocol v1.Protocol
}

// String renders "namespace/name:port" (":port" omitted when Port is empty),
// the form kube-proxy uses in rule comments and logs.
func (n ServicePortName) String() string {
	if n.Port == "" {
		return n.NamespacedName.String()
	}
	return n.NamespacedName.String() + ":" + n.Port
}

// ServicePort is what an engine knows of one service port, already reduced
// to one IP family. Engines may wrap BaseServicePort to carry more (chain
// names, a scheduler) through the MakeServicePort hook of the change tracker.
type ServicePort interface {
	// String returns "clusterIP:port/protocol".
	String() string
	// ClusterIP is the service's cluster IP of this tracker's family.
	ClusterIP() netip.Addr
	// Port is the service port number.
	Port() int
	// Protocol is TCP, UDP or SCTP.
	Protocol() v1.Protocol
	// NodePort is the node port, or 0.
	NodePort() int
	// ExternalIPs are spec.externalIPs of this family.
	ExternalIPs() []netip.Addr
	// LoadBalancerVIPs are status.loadBalancer.ingress IPs of this family
	// (those with ipMode Proxy are left out, as upstream does).
	LoadBalancerVIPs() []netip.Addr
	// LoadBalancerSourceRanges are spec.loadBalancerSourceRanges of this family.
	LoadBalancerSourceRanges() []netip.Prefix
	// SessionAffinityType is None or ClientIP.
	SessionAffinityType() v1.ServiceAffinity
	// StickyMaxAgeSeconds is the ClientIP affinity timeout (default 10800).
	StickyMaxAgeSeconds() int
	// HealthCheckNodePort is spec.healthCheckNodePort, or 0.
	HealthCheckNodePort() int
	// ExternalPolicyLocal is externalTrafficPolicy: Local on an
	// externally accessible service.
	ExternalPolicyLocal() bool
	// InternalPolicyLocal is internalTrafficPolicy: Local.
	InternalPolicyLocal() bool
	// TrafficDistribution is spec.trafficDistribution, or "".
	TrafficDistribution() string
	// HintsAnnotation is the service.kubernetes.io/topology-mode (or the
	// older topology-aware-hints) annotation value, or "".
	HintsAnnotation() string
	// Annotations are the Service's annotations (read only), so engines can
	// honour their own (e.g. an IPVS scheduler per service).
	Annotations() map[string]string
	// ExternallyAccessible reports a NodePort, external IP or load-balancer VIP.
	ExternallyAccessible() bool
	// UsesClusterEndpoints reports whether any traffic is sent to the
	// cluster-wide endpoint set: internalTrafficPolicy Cluster, or an
	// externally accessible service (whose traffic from inside the node is
	// short-circuited to the cluster set even under eTP Local).
	UsesClusterEndpoints() bool
	// UsesLocalEndpoints reports whether any traffic is restricted to
	// node-local endpoints (either policy Local).
	UsesLocalEndpoints() bool
}

// BaseServicePort is the plain ServicePort built by the change tracker.
// Its fields are exported so tests and engines can build one directly.
type BaseServicePort struct {
	ClusterIPAddr            netip.Addr
	PortNum                  int
	ProtocolValue            v1.Protocol
	NodePortNum              int
	ExternalIPAddrs          []netip.Addr
	LoadBalancerVIPAddrs     []netip.Addr
	LoadBalancerRanges       []netip.Prefix
	SessionAffinity          v1.ServiceAffinity
	StickyMaxAge             int
	HealthCheckNodePortNum   int
	ExternalLocal            bool
	InternalLocal            bool
	TrafficDistributionValue string
	HintsAnnotationValue     string
	AnnotationsValue         map[string]string
}

var _ ServicePort = &BaseServicePort{}

func (s *BaseServicePort) String() string {
	return net2str(s.ClusterIPAddr, s.PortNum) + "/" + string(s.ProtocolValue)
}
func (s *BaseServicePort) ClusterIP() netip.Addr                    { return s.ClusterIPAddr }
func (s *BaseServicePort) Port() int                                { return s.PortNum }
func (s *BaseServicePort) Protocol() v1.Protocol                    { return s.ProtocolValue }
func (s *BaseServicePort) NodePort() int                            { return s.NodePortNum }
func (s *BaseServicePort) ExternalIPs() []netip.Addr                { return s.ExternalIPAddrs }
func (s *BaseServicePort) LoadBalancerVIPs() []netip.Addr           { return s.LoadBalancerVIPAddrs }
func (s *BaseServicePort) LoadBalancerSourceRanges() []netip.Prefix { return s.LoadBalancerRanges }
func (s *BaseServicePort) SessionAffinityType() v1.ServiceAffinity  { return s.SessionAffinity }
func (s *BaseServicePort) StickyMaxAgeSeconds() int                 { return s.StickyMaxAge }
func (s *BaseServicePort) HealthCheckNodePort() int                 { return s.HealthCheckNodePortNum }
func (s *BaseServicePort) ExternalPolicyLocal() bool                { return s.ExternalLocal }
func (s *BaseServicePort) InternalPolicyLocal() bool                { return s.InternalLocal }
func (s *BaseServicePort) TrafficDistribution() string              { return s.TrafficDistributionValue }
func (s *BaseServicePort) HintsAnnotation() string                  { return s.HintsAnnotationValue }
func (s *BaseServicePort) Annotations() map[string]string           { return s.AnnotationsValue }

func (s *BaseServicePort) ExternallyAccessible() bool {
	return s.NodePortNum != 0 || len(s.LoadBalancerVIPAddrs) != 0 || len(s.ExternalIPAddrs) != 0
}

func (s *BaseServicePort) UsesClusterEndpoints() bool {
	// Cluster endpoints are used by internal traffic unless iTP is Local,
	// and whenever the service is externally accessible: even with eTP
	// Local, traffic from pods and from the node itself to an external
	// address is short-circuited to the cluster-wide set (as kube-proxy).
	return !s.InternalLocal || s.ExternallyAccessible()
}

func (s *BaseServicePort) UsesLocalEndpoints() bool {
	return s.InternalLocal || (s.ExternalLocal && s.ExternallyAccessible())
}

// Endpoint is one backend address of a service port, reduced to what the
// engines need. Engines may wrap BaseEndpoint through the MakeEndpoint hook.
type Endpoint interface {
	// String returns "ip:port" ("[ip]:port" for IPv6).
	String() string
	IP() netip.Addr
	Port() int
	// IsLocal reports that the endpoint runs on this proxier's node.
	IsLocal() bool
	// IsReady is the EndpointSlice ready condition (unset counts as ready).
	IsReady() bool
	// IsServing is the serving condition (unset: same as ready).
	IsServing() bool
	// IsTerminating is the terminating condition.
	IsTerminating() bool
	// ZoneHints is hints.forZones, nil when the slice carries no hints.
	ZoneHints() sets.Set[string]
	// NodeHints is hints.forNodes, nil when the slice carries none.
	NodeHints() sets.Set[string]
	// NodeName and Zone are the endpoint's nodeName and zone, or "".
	NodeName() string
	Zone() string
}

// BaseEndpoint is the plain Endpoint built by the change tracker.
type BaseEndpoint struct {
	Addr        netip.Addr
	PortNum     int
	Local       bool
	Ready       bool
	Serving     bool
	Terminating bool
	Zones       sets.Set[string]
	Nodes       sets.Set[string]
	Node        string
	ZoneName    string
}

var _ Endpoint = &BaseEndpoint{}

func (e *BaseEndpoint) String() string              { return net2str(e.Addr, e.PortNum) }
func (e *BaseEndpoint) IP() netip.Addr              { return e.Addr }
func (e *BaseEndpoint) Port() int                   { return e.PortNum }
func (e *BaseEndpoint) IsLocal() bool               { return e.Local }
func (e *BaseEndpoint) IsReady() bool               { return e.Ready }
func (e *BaseEndpoint) IsServing() bool             { return e.Serving }
func (e *BaseEndpoint) IsTerminating() bool         { return e.Terminating }
func (e *BaseEndpoint) ZoneHints() sets.Set[string] { return e.Zones }
func (e *BaseEndpoint) NodeHints() sets.Set[string] { return e.Nodes }
func (e *BaseEndpoint) NodeName() string            { return e.Node }
func (e *BaseEndpoint) Zone() string                { return e.ZoneName }

// net2str formats ip:port, bracketing IPv6 addresses.
func net2str(ip netip.Addr, port int) string {
	if !ip.IsValid() {
		return ":" + strconv.Itoa(port)
	}
	return netip.AddrPortFrom(ip, uint16(port)).String()
}

// ServiceEndpoint names one endpoint of one service port; used to report
// which UDP conntrack entries must be cleared.
type ServiceEndpoint struct {
	Endpoint        string // "ip:port"
	ServicePortName ServicePortName
}

func (se ServiceEndpoint) String() string {
	return fmt.Sprintf("%s -> %s", se.ServicePortName, se.Endpoint)
}
