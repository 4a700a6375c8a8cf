package userspace

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/proxy"
)

// planTrafficPolicy decides the endpoint sets of a service port. It has up
// to two, each with its own socket: the cluster set (every usable
// endpoint) and the local set (this node's), chosen with
// proxy.CategorizeEndpoints (traffic policies, topology, terminating
// fallback). Cluster-IP traffic uses the set internalTrafficPolicy names;
// node-port, external-IP and load-balancer traffic the set
// externalTrafficPolicy names, except that, as in kube-proxy, traffic from
// pods (ClusterCIDRs) and from the node itself is short-circuited to the
// cluster set (see externalDst).
func (b *planner) planTrafficPolicy(name proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint, affinity Affinity) {
	plan := b.plan
	cluster, local, _, hasAny := proxy.CategorizeEndpoints(eps, svc, b.pp.nodeName, b.pp.nodeLabels)
	external := svc.ExternallyAccessible()
	iLocal, eLocal := svc.InternalPolicyLocal(), external && svc.ExternalPolicyLocal()
	b.clusterKey = BalancerKey{ServicePortName: name}
	b.localKey = BalancerKey{ServicePortName: name, Local: true}
	if !iLocal || external {
		plan.frontends = append(plan.frontends, frontendPlan{key: b.clusterKey, endpoints: endpointAddrs(cluster), affinity: affinity, drop: hasAny})
	}
	if iLocal || eLocal {
		plan.frontends = append(plan.frontends, frontendPlan{key: b.localKey, endpoints: endpointAddrs(local), affinity: affinity, drop: hasAny})
	}
	plan.noLocalInternal = iLocal && len(local) == 0
	plan.noLocalExternal = eLocal && len(local) == 0
	b.internalKey, b.externalKey = b.clusterKey, b.clusterKey
	if iLocal {
		b.internalKey = b.localKey
	}
	if eLocal {
		b.externalKey = b.localKey
	}
}

// endpointAddrs returns the valid addresses of set, sorted, without duplicates.
func endpointAddrs(set []proxy.Endpoint) []netip.AddrPort {
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
