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
// service port. Pure: no I/O, input not modified. Each kind of address
// is planned in a file of its own (plan_clusterip.go, plan_nodeport.go,
// plan_externalip.go, plan_loadbalancer.go, plan_healthcheck.go), from
// the endpoint selection made here once; the remote endpoints the LBs need
// are planned last (plan_remote.go). LBs come in this order: cluster IP,
// node port, external IPs, then each ingress IP and its health check.
//
// Endpoint selection is the shared one (proxy.CategorizeEndpoints): ready
// endpoints, else serving-and-terminating ones, for every kind of LB.
// kube-proxy's winkernel falls back to terminating endpoints only for
// services with load-balancer ingress IPs; here every kind does, as in the
// Linux modes.
func planServicePort(env *planEnv, svc proxy.ServicePort, eps []proxy.Endpoint) servicePlan {
	var plan servicePlan
	sel := selectBackends(env, svc, eps, &plan)
	planClusterIP(env, sel, &plan)
	planNodePort(sel, &plan)
	planExternalIPs(sel, &plan)
	planLoadBalancerIngress(env, sel, &plan)
	planRemotes(env, &plan)
	return plan
}

// selection is what every kind of LB of one service port is planned
// from: its backends, its protocol and the settings all its LBs share.
type selection struct {
	svc   proxy.ServicePort
	proto uint16
	// common holds the source VIP, distribution and IPv6 flag of every LB.
	common wantLB
	// cluster and local are the backends of each policy, with the
	// internal port of each.
	cluster, local []backend
	portC, portL   uint16
	// hasAny: the service has endpoints at all (health-check VIPs).
	hasAny bool
	// preserveDIP: the preserve-destination annotation, with HNS's DSR.
	preserveDIP bool
	// externalDSR is FlagDSR for externalTrafficPolicy: Local with DSR.
	externalDSR LBFlags
}

// selectBackends makes the endpoint selection and the settings shared by
// every LB of svc.
func selectBackends(env *planEnv, svc proxy.ServicePort, eps []proxy.Endpoint, plan *servicePlan) *selection {
	cluster, local, _, hasAny := proxy.CategorizeEndpointsShared(eps, svc, env.nodeName, env.nodeLabels)
	sel := &selection{svc: svc, proto: protocolNumber(svc.Protocol()), hasAny: hasAny,
		preserveDIP: env.dsr && strings.EqualFold(svc.Annotations()[AnnotationPreserveDestination], "true")}
	if sel.preserveDIP && !svc.UsesLocalEndpoints() {
		// No Local policy, so the shared selection made no local set: the
		// local part of the cluster set.
		for _, ep := range cluster {
			if ep.IsLocal() {
				local = append(local, ep)
			}
		}
	}
	sel.cluster, sel.portC = env.backends(cluster, plan)
	sel.local, sel.portL = env.backends(local, plan)
	sel.common.SourceVIP = env.sourceVIPFor(sel.cluster, sel.local)
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		sel.common.Distribution = DistributionSourceIP
	}
	if env.ipv6 {
		sel.common.Flags |= FlagIPv6
	}
	if env.dsr && svc.ExternalPolicyLocal() {
		sel.externalDSR = FlagDSR
	}
	return sel
}

// external are the backends of traffic from outside the cluster
// (externalTrafficPolicy).
func (sel *selection) external() ([]backend, uint16) {
	if sel.svc.ExternalPolicyLocal() {
		return sel.local, sel.portL
	}
	return sel.cluster, sel.portC
}

// nodePortBackends are the backends of node ports and ingress IPs: the
// external ones, or the local ones with the preserve-destination
// annotation.
func (sel *selection) nodePortBackends() ([]backend, uint16) {
	if sel.preserveDIP {
		return sel.local, sel.portL
	}
	return sel.external()
}

// add appends an LB of sel's service port to plan, unless it would have
// no backend or its port is out of range: then there is no LB (HNS has no
// reject, the traffic is dropped).
func (plan *servicePlan) add(sel *selection, kind lbKind, proto uint16, vip netip.Addr, port int, backends []backend, internal uint16, flags LBFlags) {
	if len(backends) == 0 || port <= 0 || port > 65535 {
		return
	}
	lb := sel.common
	lb.Kind = kind
	lb.Backends = backends
	lb.InternalPort = internal
	lb.Flags |= flags
	lb.Key = LBKey{VIP: vip, Protocol: proto, Port: uint16(port), IPv6: lb.Flags&FlagIPv6 != 0}
	plan.LBs = append(plan.LBs, lb)
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
