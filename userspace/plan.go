package userspace

import (
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
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

// listenerPlan is one desired proxy socket and the traffic captured to it.
type listenerPlan struct {
	id listenerID
	// portals are the service addresses redirected to this socket
	// (CaptureIPTables only).
	portals []netip.AddrPort
	// nodePort is the node port redirected to this socket (CaptureIPTables only).
	nodePort int
}

// frontendPlan is one endpoint set.
type frontendPlan struct {
	key       BalancerKey
	endpoints []netip.AddrPort
	affinity  Affinity
}

// servicePlan is the desired state of one service port.
type servicePlan struct {
	name      proxy.ServicePortName
	protocol  v1.Protocol
	frontends []frontendPlan
	listeners []listenerPlan
	// noLocalInternal / noLocalExternal: a Local traffic policy leaves
	// that traffic with no endpoint (for the no_local_endpoints metric).
	noLocalInternal, noLocalExternal bool
}

// planParams is what planService needs besides the service.
type planParams struct {
	capture    CaptureMode
	listen     netip.Addr
	nodeName   string
	nodeLabels map[string]string
}

// planService computes the desired proxy sockets and endpoint sets of one
// service port. It does no I/O. It returns ErrUnsupportedProtocol for
// anything but TCP and UDP.
func planService(name proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint, pp planParams) (*servicePlan, error) {
	proto := svc.Protocol()
	if proto != v1.ProtocolTCP && proto != v1.ProtocolUDP {
		return nil, ErrUnsupportedProtocol
	}
	plan := &servicePlan{name: name, protocol: proto}

	cluster, local, _, _ := proxy.CategorizeEndpoints(eps, svc, pp.nodeName, pp.nodeLabels)
	affinity := Affinity{}
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		affinity = Affinity{ClientIP: true, Timeout: time.Duration(svc.StickyMaxAgeSeconds()) * time.Second}
	}
	pick := func(localOnly bool) []netip.AddrPort {
		set := cluster
		if localOnly {
			set = local
		}
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

	internalKey := BalancerKey{ServicePortName: name}
	plan.frontends = append(plan.frontends, frontendPlan{key: internalKey, endpoints: pick(svc.InternalPolicyLocal()), affinity: affinity})
	plan.noLocalInternal = svc.InternalPolicyLocal() && len(local) == 0
	plan.noLocalExternal = svc.ExternallyAccessible() && svc.ExternalPolicyLocal() && len(local) == 0
	externalKey := internalKey
	if svc.ExternallyAccessible() && svc.ExternalPolicyLocal() != svc.InternalPolicyLocal() {
		externalKey = BalancerKey{ServicePortName: name, External: true}
		plan.frontends = append(plan.frontends, frontendPlan{key: externalKey, endpoints: pick(svc.ExternalPolicyLocal()), affinity: affinity})
	}

	port := uint16(svc.Port())
	var internalVIPs, externalVIPs []netip.AddrPort
	if ip := svc.ClusterIP(); ip.IsValid() && !ip.IsUnspecified() {
		internalVIPs = append(internalVIPs, netip.AddrPortFrom(ip.Unmap(), port))
	}
	for _, ip := range svc.ExternalIPs() {
		externalVIPs = append(externalVIPs, netip.AddrPortFrom(ip.Unmap(), port))
	}
	for _, ip := range svc.LoadBalancerVIPs() {
		externalVIPs = append(externalVIPs, netip.AddrPortFrom(ip.Unmap(), port))
	}
	slices.SortFunc(externalVIPs, netip.AddrPort.Compare)
	externalVIPs = slices.Compact(externalVIPs)
	nodePort := svc.NodePort()

	switch pp.capture {
	case CaptureIPTables:
		in := listenerPlan{id: listenerID{kind: listenProxyPort, protocol: proto, key: internalKey}, portals: internalVIPs}
		if externalKey == internalKey {
			in.portals = append(in.portals, externalVIPs...)
			in.nodePort = nodePort
			plan.listeners = append(plan.listeners, in)
		} else {
			plan.listeners = append(plan.listeners, in,
				listenerPlan{id: listenerID{kind: listenProxyPort, protocol: proto, key: externalKey}, portals: externalVIPs, nodePort: nodePort})
		}
	case CaptureNone:
		plan.listeners = append(plan.listeners, listenerPlan{id: listenerID{kind: listenProxyPort, protocol: proto, key: internalKey}})
		if externalKey != internalKey {
			plan.listeners = append(plan.listeners, listenerPlan{id: listenerID{kind: listenProxyPort, protocol: proto, key: externalKey}})
		}
	case CaptureBind:
		for _, vip := range internalVIPs {
			plan.listeners = append(plan.listeners, listenerPlan{id: listenerID{kind: listenFixed, protocol: proto, key: internalKey, bind: vip}})
		}
		for _, vip := range externalVIPs {
			plan.listeners = append(plan.listeners, listenerPlan{id: listenerID{kind: listenFixed, protocol: proto, key: externalKey, bind: vip}})
		}
	}
	if nodePort > 0 && nodePort <= 65535 && pp.capture != CaptureIPTables {
		plan.listeners = append(plan.listeners, listenerPlan{id: listenerID{kind: listenFixed, protocol: proto, key: externalKey,
			bind: netip.AddrPortFrom(pp.listen, uint16(nodePort))}})
	}
	return plan, nil
}

// planAll plans every service port of a tracker update. Service ports that
// cannot be served (SCTP) are returned in skipped.
func planAll(services changetracker.ServicePortMap, endpoints changetracker.EndpointsMap, pp planParams) (plans map[proxy.ServicePortName]*servicePlan, skipped map[proxy.ServicePortName]error) {
	plans = make(map[proxy.ServicePortName]*servicePlan, len(services))
	for name, svc := range services {
		plan, err := planService(name, svc, endpoints[name], pp)
		if err != nil {
			if skipped == nil {
				skipped = map[proxy.ServicePortName]error{}
			}
			skipped[name] = err
			continue
		}
		plans[name] = plan
	}
	return plans, skipped
}
