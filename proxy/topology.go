package proxy

import (
	v1 "k8s.io/api/core/v1"
)

// Topology modes chosen for one service port by topologyMode.
const (
	topologyNone     = ""
	topologySameZone = v1.ServiceTrafficDistributionPreferSameZone
	topologySameNode = v1.ServiceTrafficDistributionPreferSameNode
)

// CategorizeEndpoints splits the endpoints of one service port into the sets
// an engine programs, following kube-proxy (k8s.io/kubernetes pkg/proxy,
// release 1.34):
//
//   - clusterEndpoints serve traffic under the Cluster policy: the ready
//     endpoints, narrowed by topology hints when the service asks for
//     topology-aware routing (see below); if there are no ready endpoints at
//     all, the endpoints that are serving and terminating (so a rolling
//     update that replaced every pod still has somewhere to send traffic).
//     nil when the service uses no Cluster policy.
//   - localEndpoints serve traffic under the Local policy
//     (externalTrafficPolicy or internalTrafficPolicy Local): this node's
//     ready endpoints, or if there are none, this node's serving and
//     terminating endpoints. nil when no policy is Local.
//   - allReachableEndpoints is the union of both (each endpoint once, in the
//     order of the input): every endpoint some traffic may reach, e.g. for
//     session-affinity or conntrack bookkeeping.
//   - hasAnyEndpoints reports whether the service has any usable endpoint
//     anywhere in the cluster (ready, or serving and terminating), even if
//     none is usable from this node; engines use it to choose between
//     "reject, no endpoints" and "drop, no local endpoints".
//
// Topology, as kube-proxy 1.34: the hints on the endpoints decide, not the
// Service (the EndpointSlice controller writes hints only for services that
// ask for them through spec.trafficDistribution or the topology-mode
// annotation, so honouring them wherever they are present is the same rule
// seen from the data plane, and it keeps working when another controller
// writes hints). With the all-or-nothing rule:
//
//   - if every ready endpoint carries node hints and at least one is hinted
//     for nodeName, only endpoints hinted for nodeName are used;
//   - else, if every ready endpoint carries zone hints and at least one is
//     hinted for this node's zone (nodeLabels[topology.kubernetes.io/zone]),
//     only endpoints hinted for that zone are used;
//   - else hints are ignored and every ready endpoint is used.
//
// CategorizeEndpoints does no I/O and does not modify its input; the
// returned slices are new (they never alias endpoints).
func CategorizeEndpoints(endpoints []Endpoint, svc ServicePort, nodeName string, nodeLabels map[string]string) (clusterEndpoints, localEndpoints, allReachableEndpoints []Endpoint, hasAnyEndpoints bool) {
	return categorize(endpoints, svc, nodeName, nodeLabels, false)
}

// CategorizeEndpointsShared is CategorizeEndpoints, except that a result
// that keeps every endpoint is endpoints itself, its capacity clipped (an
// append to it copies). The caller must not modify the results' elements
// in place; in exchange the common case (every endpoint ready, no
// topology) copies nothing, on every sync of every service port.
func CategorizeEndpointsShared(endpoints []Endpoint, svc ServicePort, nodeName string, nodeLabels map[string]string) (clusterEndpoints, localEndpoints, allReachableEndpoints []Endpoint, hasAnyEndpoints bool) {
	return categorize(endpoints, svc, nodeName, nodeLabels, true)
}

func categorize(endpoints []Endpoint, svc ServicePort, nodeName string, nodeLabels map[string]string, share bool) (clusterEndpoints, localEndpoints, allReachableEndpoints []Endpoint, hasAnyEndpoints bool) {
	filterEndpoints := func(endpoints []Endpoint, keep func(Endpoint) bool) []Endpoint {
		return filter(endpoints, keep, share)
	}
	if len(endpoints) == 0 {
		return nil, nil, nil, false
	}

	mode := topologyNone
	var inCluster func(Endpoint) bool
	if svc.UsesClusterEndpoints() {
		zone := nodeLabels[LabelTopologyZone]
		mode = topologyMode(endpoints, nodeName, zone)
		inCluster = func(ep Endpoint) bool {
			return ep.IsReady() && availableForTopology(ep, mode, nodeName, zone)
		}
		clusterEndpoints = filterEndpoints(endpoints, inCluster)
		if len(clusterEndpoints) == 0 {
			// No ready endpoint anywhere (topology never empties the set:
			// it is only used when it leaves at least one endpoint).
			inCluster = servingTerminating
			clusterEndpoints = filterEndpoints(endpoints, inCluster)
		}
		hasAnyEndpoints = len(clusterEndpoints) > 0
	}

	if !svc.UsesLocalEndpoints() {
		return clusterEndpoints, nil, clusterEndpoints, hasAnyEndpoints
	}

	var localReady, localServingTerminating bool
	for _, ep := range endpoints {
		switch {
		case ep.IsReady():
			hasAnyEndpoints = true
			localReady = localReady || ep.IsLocal()
		case servingTerminating(ep):
			hasAnyEndpoints = true
			localServingTerminating = localServingTerminating || ep.IsLocal()
		}
	}
	usesTerminating := false
	var inLocal func(Endpoint) bool
	switch {
	case localReady:
		inLocal = func(ep Endpoint) bool { return ep.IsLocal() && ep.IsReady() }
		localEndpoints = filterEndpoints(endpoints, inLocal)
	case localServingTerminating:
		usesTerminating = true
		inLocal = func(ep Endpoint) bool { return ep.IsLocal() && servingTerminating(ep) }
		localEndpoints = filterEndpoints(endpoints, inLocal)
	}

	if !svc.UsesClusterEndpoints() {
		return nil, localEndpoints, localEndpoints, hasAnyEndpoints
	}
	if mode == topologyNone && !usesTerminating {
		// clusterEndpoints already holds every ready endpoint, which
		// includes every local ready one.
		return clusterEndpoints, localEndpoints, clusterEndpoints, hasAnyEndpoints
	}
	// Topology may have left local endpoints out of the cluster set, and
	// the local set may hold terminating endpoints: merge, keeping the
	// input order.
	allReachableEndpoints = filterEndpoints(endpoints, func(ep Endpoint) bool {
		return inCluster(ep) || (inLocal != nil && inLocal(ep))
	})
	return clusterEndpoints, localEndpoints, allReachableEndpoints, hasAnyEndpoints
}

// topologyMode applies the all-or-nothing rule to the ready endpoints: node
// hints win if all carry them and one names this node; then zone hints if
// all carry them and one names this zone; else no topology.
func topologyMode(endpoints []Endpoint, nodeName, zone string) string {
	allNodeHints, allZoneHints := true, true
	forNode, forZone := false, false
	anyReady := false
	for _, ep := range endpoints {
		if !ep.IsReady() {
			continue
		}
		anyReady = true
		if ep.NodeHints().Len() == 0 {
			allNodeHints = false
		} else if nodeName != "" && ep.NodeHints().Has(nodeName) {
			forNode = true
		}
		if ep.ZoneHints().Len() == 0 {
			allZoneHints = false
		} else if zone != "" && ep.ZoneHints().Has(zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return topologyNone
	case allNodeHints && forNode:
		return topologySameNode
	case allZoneHints && forZone:
		return topologySameZone
	}
	return topologyNone
}

func availableForTopology(ep Endpoint, mode, nodeName, zone string) bool {
	switch mode {
	case topologySameNode:
		return ep.NodeHints().Has(nodeName)
	case topologySameZone:
		return ep.ZoneHints().Has(zone)
	}
	return true
}

func servingTerminating(ep Endpoint) bool { return ep.IsServing() && ep.IsTerminating() }

// filter returns the endpoints keep keeps, in order: a new slice, or with
// share endpoints itself (capacity clipped) when it keeps them all.
func filter(endpoints []Endpoint, keep func(Endpoint) bool, share bool) []Endpoint {
	i := 0
	if share {
		for i < len(endpoints) && keep(endpoints[i]) {
			i++
		}
		if i == len(endpoints) {
			return endpoints[:i:i]
		}
	}
	out := make([]Endpoint, i, len(endpoints))
	copy(out, endpoints[:i])
	for _, ep := range endpoints[i:] {
		if keep(ep) {
			out = append(out, ep)
		}
	}
	return out
}
