package winkernel

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// AnnotationPreserveDestination is the Service annotation ("true") that
// makes load-balancer ingress traffic keep its destination IP (DSR with
// PreserveDIP and UseMux) and restricts node-port and ingress traffic to
// local endpoints, as in kube-proxy.
const AnnotationPreserveDestination = "preserve-destination"

// planEnv is everything a plan depends on besides the service and its
// endpoints: the node, the network and the configuration.
type planEnv struct {
	ipv6        bool
	nodeName    string
	nodeLabels  map[string]string
	nodeIP      netip.Addr
	sourceVIP   netip.Addr // configured (overlay) or node IP (l2bridge)
	hostMAC     string
	overlay     bool
	network     *Network
	dsr         bool // DSR supported by HNS
	enableDSR   bool
	rootIP      netip.Addr // the root endpoint, when health-check VIPs are forwarded
	healthzPort int
}

// backend is one endpoint an LB forwards to.
type backend struct {
	IP    netip.Addr
	Port  uint16
	Local bool
}

// lbKind says which of a service's addresses an LB serves.
type lbKind string

const (
	kindClusterIP    lbKind = "cluster-ip"
	kindNodePort     lbKind = "node-port"
	kindExternalIP   lbKind = "external-ip"
	kindLoadBalancer lbKind = "load-balancer"
	kindHealthCheck  lbKind = "health-check"
)

// wantLB is a planned load balancer, with backends by address (their
// HNS IDs are resolved at apply time).
type wantLB struct {
	Kind         lbKind
	Key          LBKey
	SourceVIP    netip.Addr
	InternalPort uint16
	Backends     []backend
	Flags        LBFlags
	Distribution Distribution
}

// wantRemote is a planned remote HNS endpoint.
type wantRemote struct {
	IP              netip.Addr
	MAC             string
	ProviderAddress netip.Addr
}

// servicePlan is the HNS state one service port needs.
type servicePlan struct {
	LBs     []wantLB
	Remotes []wantRemote
	// Skipped explains endpoints left out (for the log).
	Skipped []string
}

// protocolNumber maps a Kubernetes protocol to HNS's number.
func protocolNumber(p v1.Protocol) uint16 {
	switch p {
	case v1.ProtocolUDP:
		return ProtocolUDP
	case v1.ProtocolSCTP:
		return ProtocolSCTP
	}
	return ProtocolTCP
}

// planServicePort plans the load balancers and remote endpoints of one
// service port. Pure: no I/O, input not modified.
//
// Endpoint selection is the shared one (proxy.CategorizeEndpoints): ready
// endpoints, else serving-and-terminating ones, for every kind of LB.
// kube-proxy's winkernel falls back to terminating endpoints only for
// services with load-balancer ingress IPs; here every kind does, as in the
// Linux modes.
func planServicePort(env *planEnv, svc proxy.ServicePort, eps []proxy.Endpoint) servicePlan {
	var plan servicePlan
	cluster, local, _, hasAny := proxy.CategorizeEndpoints(eps, svc, env.nodeName, env.nodeLabels)
	preserveDIP := env.dsr && strings.EqualFold(svc.Annotations()[AnnotationPreserveDestination], "true")
	if preserveDIP && !svc.UsesLocalEndpoints() {
		// No Local policy, so the shared selection made no local set: the
		// local part of the cluster set.
		for _, ep := range cluster {
			if ep.IsLocal() {
				local = append(local, ep)
			}
		}
	}
	clusterB, portC := env.backends(cluster, &plan)
	localB, portL := env.backends(local, &plan)

	localDSR := env.dsr && svc.ExternalPolicyLocal()
	common := wantLB{
		SourceVIP: env.sourceVIPFor(clusterB, localB),
	}
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		common.Distribution = DistributionSourceIP
	}
	if env.ipv6 {
		common.Flags |= FlagIPv6
	}
	proto := protocolNumber(svc.Protocol())

	add := func(kind lbKind, vip netip.Addr, port int, backends []backend, internal uint16, flags LBFlags) {
		if len(backends) == 0 || port <= 0 || port > 65535 {
			return // no LB: HNS has no reject, the traffic is dropped
		}
		lb := common
		lb.Kind = kind
		lb.Key = LBKey{VIP: vip, Protocol: proto, Port: uint16(port)}
		lb.Backends = backends
		lb.InternalPort = internal
		lb.Flags |= flags
		plan.LBs = append(plan.LBs, lb)
	}

	// Cluster IP (internalTrafficPolicy: Local takes only local endpoints).
	if svc.ClusterIP().IsValid() {
		b, p := clusterB, portC
		if svc.InternalPolicyLocal() {
			b, p = localB, portL
		}
		var flags LBFlags
		if env.dsr && env.enableDSR {
			flags |= FlagDSR
		}
		add(kindClusterIP, svc.ClusterIP(), svc.Port(), b, p, flags)
		if env.overlay && len(b) > 0 {
			// kube-proxy keeps a remote endpoint for the cluster IP itself
			// on overlay networks, with the host's MAC and the node IP as
			// provider address.
			plan.Remotes = append(plan.Remotes, wantRemote{IP: svc.ClusterIP(), MAC: env.hostMAC, ProviderAddress: env.nodeIP})
		}
	}

	// Node port: every host address, routed locally.
	extB, extP := clusterB, portC
	if svc.ExternalPolicyLocal() {
		extB, extP = localB, portL
	}
	npB, npP := extB, extP
	if preserveDIP {
		npB, npP = localB, portL
	}
	var extDSR LBFlags
	if localDSR {
		extDSR = FlagDSR
	}
	if svc.NodePort() > 0 {
		add(kindNodePort, netip.Addr{}, svc.NodePort(), npB, npP, FlagVipExternalIP|FlagLocalRoutedVIP|extDSR)
	}
	for _, ip := range svc.ExternalIPs() {
		add(kindExternalIP, ip, svc.Port(), extB, extP, FlagVipExternalIP|extDSR)
	}
	ingFlags := FlagVipExternalIP | extDSR
	if preserveDIP {
		ingFlags |= FlagDSR | FlagUseMux | FlagPreserveDIP
	}
	for _, ip := range svc.LoadBalancerVIPs() {
		add(kindLoadBalancer, ip, svc.Port(), npB, npP, ingFlags)
		if env.rootIP.IsValid() && hasAny {
			hc := svc.HealthCheckNodePort()
			if hc == 0 {
				hc = env.healthzPort
			}
			var hcFlags LBFlags
			if preserveDIP {
				hcFlags = FlagUseMux | FlagPreserveDIP
			}
			root := []backend{{IP: env.rootIP, Port: uint16(hc), Local: true}}
			// The health check is HTTP: TCP, whatever the service's protocol
			// (kube-proxy uses the service's protocol).
			save := proto
			proto = ProtocolTCP
			add(kindHealthCheck, ip, hc, root, uint16(hc), hcFlags)
			proto = save
		}
	}

	// Remote endpoints every LB above needs (few: a linear look for
	// duplicates costs less than a set).
	for _, lb := range plan.LBs {
		for _, b := range lb.Backends {
			if b.Local || slices.ContainsFunc(plan.Remotes, func(r wantRemote) bool { return r.IP == b.IP }) {
				continue
			}
			plan.Remotes = append(plan.Remotes, env.remoteFor(b.IP))
		}
	}
	return plan
}

// backends turns selected endpoints into LB backends, sorted by address.
// An HNS load balancer has one internal port: endpoints whose port differs
// from the first one's (a named target port resolving differently on
// different pods) are left out and reported.
func (env *planEnv) backends(eps []proxy.Endpoint, plan *servicePlan) ([]backend, uint16) {
	if len(eps) == 0 {
		return nil, 0
	}
	out := make([]backend, 0, len(eps))
	for _, ep := range eps {
		if ep.Port() <= 0 || ep.Port() > 65535 {
			continue
		}
		out = append(out, backend{IP: ep.IP(), Port: uint16(ep.Port()), Local: ep.IsLocal()})
	}
	slices.SortFunc(out, func(a, b backend) int { return a.IP.Compare(b.IP) })
	out = slices.CompactFunc(out, func(a, b backend) bool { return a.IP == b.IP })
	if len(out) == 0 {
		return nil, 0
	}
	port := out[0].Port
	kept := out[:0]
	for _, b := range out {
		if b.Port != port {
			plan.Skipped = append(plan.Skipped, fmt.Sprintf("endpoint %s: port %d differs from %d (an HNS load balancer has one internal port)", b.IP, b.Port, port))
			continue
		}
		kept = append(kept, b)
	}
	return kept, port
}

// sourceVIPFor picks the LB's source VIP as kube-proxy does: on overlay,
// the node IP when a remote backend is a node's address (a provider
// address) or outside every remote subnet (a public address), else the
// configured source VIP.
func (env *planEnv) sourceVIPFor(sets ...[]backend) netip.Addr {
	if !env.overlay {
		return env.sourceVIP
	}
	for _, backends := range sets {
		for _, b := range backends {
			if b.Local {
				continue
			}
			pa, ok := env.network.ProviderAddressFor(b.IP)
			if !ok || pa == b.IP {
				return env.nodeIP
			}
		}
	}
	return env.sourceVIP
}

// remoteFor is the remote endpoint for a backend on another node: on
// overlay, with the provider address of its remote subnet (the node IP
// when none holds it); on l2bridge with a MAC made up from the address.
func (env *planEnv) remoteFor(ip netip.Addr) wantRemote {
	r := wantRemote{IP: ip, MAC: conjureMAC(ip)}
	if env.overlay {
		if pa, ok := env.network.ProviderAddressFor(ip); ok {
			r.ProviderAddress = pa
		} else {
			r.ProviderAddress = env.nodeIP
		}
	}
	return r
}

// conjureMAC makes a MAC for a remote endpoint from its address, as
// kube-proxy does ("02-11-" and the last four bytes): it is never sent on
// the wire, only keeps the endpoints distinct.
func conjureMAC(ip netip.Addr) string {
	b := ip.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	if !ip.Is4() && !ip.Is4In6() {
		last = [4]byte{b[15], b[14], b[13], b[12]}
	}
	const hexDigits = "0123456789abcdef"
	mac := []byte("02-11-00-00-00-00")
	for i, x := range last {
		mac[6+3*i], mac[7+3*i] = hexDigits[x>>4], hexDigits[x&0xf]
	}
	return string(mac)
}
