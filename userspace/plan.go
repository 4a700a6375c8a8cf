package userspace

import (
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
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
	table   iptables.Table
	chain   iptables.Chain
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
// A service port has up to two endpoint sets, each with its own socket:
// the cluster set (every usable endpoint) and the local set (this node's).
// Cluster-IP traffic uses the set internalTrafficPolicy names; node-port,
// external-IP and load-balancer traffic the set externalTrafficPolicy
// names, except that, as in kube-proxy, traffic from pods (ClusterCIDRs)
// and from the node itself is short-circuited to the cluster set.
func planService(name proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint, pp planParams) (*servicePlan, error) {
	proto := svc.Protocol()
	if proto != v1.ProtocolTCP && proto != v1.ProtocolUDP {
		return nil, ErrUnsupportedProtocol
	}
	plan := &servicePlan{name: name, protocol: proto}

	cluster, local, _, hasAny := proxy.CategorizeEndpoints(eps, svc, pp.nodeName, pp.nodeLabels)
	affinity := Affinity{}
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		affinity = Affinity{ClientIP: true, Timeout: time.Duration(svc.StickyMaxAgeSeconds()) * time.Second}
	}
	addrs := func(set []proxy.Endpoint) []netip.AddrPort {
		out := make([]netip.AddrPort, 0, len(set))
		for _, ep := range set {
			if ep.Port() <= 0 || ep.Port() > 65535 || !ep.IP().IsValid() {
				continue
			}
			out = append(out, netip.AddrPortFrom(ep.IP().Unmap(), uint16(ep.Port())))
		}
		slices.SortFunc(out, netip.AddrPort.Compare)
		return slices.Compact(out)
	}

	external := svc.ExternallyAccessible()
	iLocal, eLocal := svc.InternalPolicyLocal(), external && svc.ExternalPolicyLocal()
	clusterKey := BalancerKey{ServicePortName: name}
	localKey := BalancerKey{ServicePortName: name, Local: true}
	needCluster := !iLocal || external
	needLocal := iLocal || eLocal
	if needCluster {
		plan.frontends = append(plan.frontends, frontendPlan{key: clusterKey, endpoints: addrs(cluster), affinity: affinity, drop: hasAny})
	}
	if needLocal {
		plan.frontends = append(plan.frontends, frontendPlan{key: localKey, endpoints: addrs(local), affinity: affinity, drop: hasAny})
	}
	plan.noLocalInternal = iLocal && len(local) == 0
	plan.noLocalExternal = eLocal && len(local) == 0
	internalKey, externalKey := clusterKey, clusterKey
	if iLocal {
		internalKey = localKey
	}
	if eLocal {
		externalKey = localKey
	}

	port := uint16(svc.Port())
	var clusterVIP netip.AddrPort
	if ip := svc.ClusterIP(); ip.IsValid() && !ip.IsUnspecified() {
		clusterVIP = netip.AddrPortFrom(ip.Unmap(), port)
	}
	var externalIPs, lbIPs []netip.AddrPort
	for _, ip := range svc.ExternalIPs() {
		externalIPs = append(externalIPs, netip.AddrPortFrom(ip.Unmap(), port))
	}
	for _, ip := range svc.LoadBalancerVIPs() {
		lbIPs = append(lbIPs, netip.AddrPortFrom(ip.Unmap(), port))
	}
	nodePort := svc.NodePort()
	if nodePort < 0 || nodePort > 65535 {
		nodePort = 0
	}

	switch pp.capture {
	case CaptureIPTables:
		sock := func(k BalancerKey) listenerID {
			return listenerID{kind: listenProxyPort, protocol: proto, key: k}
		}
		for _, f := range plan.frontends {
			plan.listeners = append(plan.listeners, sock(f.key))
			if len(f.endpoints) == 0 {
				v := verdictReject
				if f.drop {
					v = verdictDrop
				}
				plan.rules = append(plan.rules, rulePlan{table: iptables.TableFilter, chain: ChainFilter, verdict: v, target: sock(f.key), byPort: true})
			}
		}
		nat := func(chain iptables.Chain, src netip.Prefix, dst netip.Addr, dport int, k BalancerKey) {
			plan.rules = append(plan.rules, rulePlan{table: iptables.TableNAT, chain: chain, src: src, dst: dst, dstPort: dport, target: sock(k)})
		}
		// externalDst adds the rules for an address (or, with dst
		// invalid, the node port) reached as "external" traffic.
		externalDst := func(container, host iptables.Chain, dst netip.Addr, dport int, ranges []netip.Prefix) {
			if len(ranges) > 0 {
				for _, r := range ranges {
					nat(container, r, dst, dport, externalKey)
				}
				// Sources outside the ranges are not redirected and are
				// dropped on their way on (filter, FORWARD and INPUT).
				plan.rules = append(plan.rules, rulePlan{table: iptables.TableFilter, chain: ChainFilter, dst: dst, dstPort: dport, verdict: verdictDrop})
			} else {
				if externalKey != clusterKey {
					for _, c := range pp.clusterCIDRs {
						nat(container, c, dst, dport, clusterKey)
					}
				}
				nat(container, netip.Prefix{}, dst, dport, externalKey)
			}
			nat(host, netip.Prefix{}, dst, dport, clusterKey)
		}
		if clusterVIP.IsValid() {
			nat(ChainPortalsContainer, netip.Prefix{}, clusterVIP.Addr(), int(port), internalKey)
			nat(ChainPortalsHost, netip.Prefix{}, clusterVIP.Addr(), int(port), internalKey)
		}
		for _, vip := range externalIPs {
			externalDst(ChainPortalsContainer, ChainPortalsHost, vip.Addr(), int(port), nil)
		}
		var ranges []netip.Prefix
		for _, r := range svc.LoadBalancerSourceRanges() {
			if r.IsValid() && r.Addr().Is6() == pp.listen.Is6() {
				ranges = append(ranges, r.Masked())
			}
		}
		for _, vip := range lbIPs {
			externalDst(ChainPortalsContainer, ChainPortalsHost, vip.Addr(), int(port), ranges)
		}
		if nodePort > 0 {
			externalDst(ChainNodePortContainer, ChainNodePortHost, netip.Addr{}, nodePort, nil)
		}
	case CaptureNone:
		for _, f := range plan.frontends {
			plan.listeners = append(plan.listeners, listenerID{kind: listenProxyPort, protocol: proto, key: f.key})
		}
	case CaptureBind:
		fixed := func(k BalancerKey, at netip.AddrPort) {
			plan.listeners = append(plan.listeners, listenerID{kind: listenFixed, protocol: proto, key: k, bind: at})
		}
		if clusterVIP.IsValid() {
			fixed(internalKey, clusterVIP)
		}
		for _, vip := range append(slices.Clone(externalIPs), lbIPs...) {
			fixed(externalKey, vip)
		}
	}
	if nodePort > 0 && pp.capture != CaptureIPTables {
		plan.listeners = append(plan.listeners, listenerID{kind: listenFixed, protocol: proto, key: externalKey,
			bind: netip.AddrPortFrom(pp.listen, uint16(nodePort))})
	}
	slices.SortFunc(plan.listeners, compareListenerIDs)
	plan.listeners = slices.Compact(plan.listeners)
	return plan, nil
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
