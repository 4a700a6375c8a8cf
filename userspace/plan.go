package userspace

import (
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// listenerKind says how a proxy socket's address is chosen.
type listenerKind int

const (
	// listenProxyPort: ListenAddress at a port from the allocator.
	listenProxyPort listenerKind = iota
	// listenFixed: a fixed address and port (a node port, or a service
	// address in CaptureBind mode).
	listenFixed
)

// listenerID identifies one proxy socket of a service port across syncs.
type listenerID struct {
	kind     listenerKind
	protocol v1.Protocol
	key      BalancerKey
	bind     netip.AddrPort // listenFixed only
}

// frontendPlan is one endpoint set.
type frontendPlan struct {
	key       BalancerKey
	endpoints []netip.AddrPort
	affinity  Affinity
	// drop: with no endpoints in this set, new connections are dropped
	// (the service has endpoints, none usable under this policy) rather
	// than rejected (the service has none at all). CaptureIPTables only.
	drop bool
}

// ruleVerdict is what a capture rule does.
type ruleVerdict int

const (
	verdictToListener ruleVerdict = iota // REDIRECT/DNAT to the listener's proxy port
	verdictDrop                          // filter: DROP
	verdictReject                        // filter: REJECT
)

// rulePlan is one capture rule, before proxy ports are known.
type rulePlan struct {
	table   xtables.Table
	chain   xtables.Chain
	src     netip.Prefix // invalid: any source
	dst     netip.Addr   // invalid: any (node ports, addrtype LOCAL in the jump)
	dstPort int          // service port or node port; 0 with listener-port filter rules
	verdict ruleVerdict  // verdictToListener, or a filter verdict
	target  listenerID   // the listener redirected to, or whose proxy port is filtered
	byPort  bool         // filter rule on the target's proxy port (no endpoints)
}

// servicePlan is the desired state of one service port.
type servicePlan struct {
	name      proxy.ServicePortName
	protocol  v1.Protocol
	frontends []frontendPlan
	listeners []listenerID
	rules     []rulePlan // CaptureIPTables only
	// noLocalInternal / noLocalExternal: a Local traffic policy leaves
	// that traffic with no endpoint (for the no_local_endpoints metric).
	noLocalInternal, noLocalExternal bool
}

// planParams is what planService needs besides the service.
type planParams struct {
	capture      CaptureMode
	listen       netip.Addr
	nodeName     string
	nodeLabels   map[string]string
	clusterCIDRs []netip.Prefix
}

// planService computes the desired proxy sockets, endpoint sets and
// capture rules of one service port. It does no I/O. It returns
// ErrUnsupportedProtocol for anything but TCP and UDP.
//
// What it decides is split by concern, one file each: the endpoint sets
// and which traffic uses which (plan_trafficpolicy.go), session affinity
// (plan_affinity.go), and the addresses the service is reached at: its
// cluster IP (plan_clusterip.go), external IPs (plan_externalip.go),
// load-balancer IPs with their source ranges (plan_loadbalancer.go) and
// node port (plan_nodeport.go).
func planService(name proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint, pp planParams) (*servicePlan, error) {
	proto := svc.Protocol()
	if proto != v1.ProtocolTCP && proto != v1.ProtocolUDP {
		return nil, ErrUnsupportedProtocol
	}
	b := &planner{
		plan: &servicePlan{name: name, protocol: proto},
		pp:   pp,
		port: uint16(svc.Port()),
	}
	b.planTrafficPolicy(name, svc, eps, affinityOf(svc))
	b.planProxySockets()
	b.planClusterIP(svc)
	b.planExternalIPs(svc)
	b.planLoadBalancer(svc)
	b.planNodePort(svc)
	slices.SortFunc(b.plan.listeners, compareListenerIDs)
	b.plan.listeners = slices.Compact(b.plan.listeners)
	return b.plan, nil
}

// planner builds one service port's plan.
type planner struct {
	plan *servicePlan
	pp   planParams
	port uint16 // the service port
	// The endpoint sets' keys, and those that cluster-IP (internal) and
	// node-port, external-IP and load-balancer (external) traffic use.
	clusterKey, localKey, internalKey, externalKey BalancerKey
}

func (b *planner) proxySocket(k BalancerKey) listenerID {
	return listenerID{kind: listenProxyPort, protocol: b.plan.protocol, key: k}
}

// fixedSocket adds a socket bound at a fixed address.
func (b *planner) fixedSocket(k BalancerKey, at netip.AddrPort) {
	b.plan.listeners = append(b.plan.listeners, listenerID{kind: listenFixed, protocol: b.plan.protocol, key: k, bind: at})
}

// planProxySockets adds a proxy-port socket per endpoint set (CaptureIPTables:
// the rules redirect to it; CaptureNone: clients connect to it) and, with
// capture rules, the filter rule that refuses new connections to a set
// without endpoints.
func (b *planner) planProxySockets() {
	if b.pp.capture == CaptureBind {
		return
	}
	for _, f := range b.plan.frontends {
		b.plan.listeners = append(b.plan.listeners, b.proxySocket(f.key))
		if b.pp.capture == CaptureIPTables && len(f.endpoints) == 0 {
			v := verdictReject
			if f.drop {
				v = verdictDrop
			}
			b.plan.rules = append(b.plan.rules, rulePlan{table: xtables.TableFilter, chain: ChainFilter, verdict: v, target: b.proxySocket(f.key), byPort: true})
		}
	}
}

// nat adds a capture rule redirecting dst:dport (from src) to k's proxy socket.
func (b *planner) nat(chain xtables.Chain, src netip.Prefix, dst netip.Addr, dport int, k BalancerKey) {
	b.plan.rules = append(b.plan.rules, rulePlan{table: xtables.TableNAT, chain: chain, src: src, dst: dst, dstPort: dport, target: b.proxySocket(k)})
}

// externalDst adds the capture rules for an address (or, with dst
// invalid, the node port) reached as "external" traffic: from pods and
// the outside through container, from the node through host. With source
// ranges, only those sources are redirected and the rest dropped.
func (b *planner) externalDst(container, host xtables.Chain, dst netip.Addr, dport int, ranges []netip.Prefix) {
	if len(ranges) > 0 {
		for _, r := range ranges {
			b.nat(container, r, dst, dport, b.externalKey)
		}
		// Sources outside the ranges are not redirected and are
		// dropped on their way on (filter, FORWARD and INPUT).
		b.plan.rules = append(b.plan.rules, rulePlan{table: xtables.TableFilter, chain: ChainFilter, dst: dst, dstPort: dport, verdict: verdictDrop})
	} else {
		if b.externalKey != b.clusterKey {
			// As kube-proxy: pods reaching an externalTrafficPolicy: Local
			// service's external address get every endpoint.
			for _, c := range b.pp.clusterCIDRs {
				b.nat(container, c, dst, dport, b.clusterKey)
			}
		}
		b.nat(container, netip.Prefix{}, dst, dport, b.externalKey)
	}
	// The node's own traffic is short-circuited to the cluster set.
	b.nat(host, netip.Prefix{}, dst, dport, b.clusterKey)
}

func compareListenerIDs(a, b listenerID) int {
	if a.kind != b.kind {
		return int(a.kind) - int(b.kind)
	}
	if a.key.Local != b.key.Local {
		if a.key.Local {
			return 1
		}
		return -1
	}
	return a.bind.Compare(b.bind)
}
