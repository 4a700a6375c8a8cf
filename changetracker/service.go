package changetracker

import (
	"cmp"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
)

// defaultStickyMaxAgeSeconds is the ClientIP affinity timeout when the
// service does not set one (the API server's default, 3 hours).
const defaultStickyMaxAgeSeconds = 10800

// ServiceChangeTracker records Service changes between syncs, for one IP
// family. Its methods are safe for concurrent use.
type ServiceChangeTracker struct {
	family          v1.IPFamily
	proxyName       string
	makeServicePort MakeServicePortFunc
	log             logr.Logger

	skipped atomic.Uint64

	// otherFamily are the services skipped because every cluster IP they
	// have is of the other family (each logged once, at V(2)).
	famMu       sync.Mutex
	otherFamily map[types.NamespacedName]struct{}

	mu sync.Mutex
	// items holds, per service, the ports as last applied ("previous")
	// and as most recently reported ("current").
	items map[types.NamespacedName]*serviceChange
}

type serviceChange struct {
	previous, current servicePorts
}

// namedPort is one port of a service, under its name.
type namedPort struct {
	name proxy.ServicePortName
	port proxy.ServicePort
}

// servicePorts are one service's ports sorted by port name then protocol
// (a map per service would cost far more memory: most services have one
// port).
type servicePorts []namedPort

// get returns the named port and whether the service has it.
func (s servicePorts) get(name proxy.ServicePortName) (proxy.ServicePort, bool) {
	for i := range s {
		if s[i].name == name {
			return s[i].port, true
		}
	}
	return nil, false
}

// NewServiceChangeTracker returns a tracker for cfg.IPFamily. An unknown
// family (neither IPv4 nor IPv6) is logged and treated as IPv4.
func NewServiceChangeTracker(cfg ServiceTrackerConfig) *ServiceChangeTracker {
	fam := cfg.IPFamily
	if fam != v1.IPv4Protocol && fam != v1.IPv6Protocol {
		cfg.Logger.Error(nil, "Unknown IP family for service change tracker, using IPv4", "ipFamily", fam)
		fam = v1.IPv4Protocol
	}
	return &ServiceChangeTracker{
		family:          fam,
		proxyName:       cfg.ServiceProxyName,
		makeServicePort: cfg.MakeServicePort,
		log:             cfg.Logger,
		items:           make(map[types.NamespacedName]*serviceChange),
		otherFamily:     make(map[types.NamespacedName]struct{}),
	}
}

// Update records a change of one service: previous nil is an add, current
// nil a delete. The ports as they were before the first unapplied change
// are kept, so a service that returns to them is no change at all. It
// returns whether any change is pending (for this or any other service).
// The Service objects are not modified; the tracker keeps references to
// their annotation maps, so callers must not mutate them afterwards (as
// with any informer object).
func (t *ServiceChangeTracker) Update(previous, current *v1.Service) bool {
	svc := current
	if svc == nil {
		svc = previous
	}
	if svc == nil {
		return t.pending() > 0
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	// Build outside the lock: it is the expensive part.
	curr := t.servicePorts(current, true)
	if current == nil {
		t.forgetOtherFamily(nn)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	change, ok := t.items[nn]
	if !ok {
		// previous was reported when it was current: build it quietly.
		change = &serviceChange{previous: t.servicePorts(previous, false)}
		t.items[nn] = change
	}
	change.current = curr
	if portMapsEqual(change.previous, change.current) {
		delete(t.items, nn)
	}
	return len(t.items) > 0
}

// Pending returns the number of services with an unapplied change.
func (t *ServiceChangeTracker) Pending() int { return t.pending() }

func (t *ServiceChangeTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.items)
}

func portMapsEqual(a, b servicePorts) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// Update applies the pending changes of t to m (which must be non-nil:
// start from make(ServicePortMap)) and reports what changed. Its cost is
// proportional to the number of changed services. Apply one tracker's
// changes to one map only: the tracker's "previous" state is that map's.
func (m ServicePortMap) Update(t *ServiceChangeTracker) UpdateServiceMapResult {
	res, _ := m.apply(t)
	return res
}

// apply is Update that also hands back the applied changes, for Tracker.
func (m ServicePortMap) apply(t *ServiceChangeTracker) (UpdateServiceMapResult, map[types.NamespacedName]*serviceChange) {
	t.mu.Lock()
	changes := t.items
	t.items = make(map[types.NamespacedName]*serviceChange)
	t.mu.Unlock()

	res := UpdateServiceMapResult{
		UpdatedServices:      make(sets.Set[types.NamespacedName], len(changes)),
		DeletedUDPClusterIPs: sets.New[netip.Addr](),
	}
	var deletedNames []proxy.ServicePortName
	for nn, change := range changes {
		res.UpdatedServices.Insert(nn)
		for _, prev := range change.previous {
			cur, still := change.current.get(prev.name)
			if prev.name.Protocol == v1.ProtocolUDP && (!still || cur.ClusterIP() != prev.port.ClusterIP()) {
				res.DeletedUDPClusterIPs.Insert(prev.port.ClusterIP())
			}
			if !still {
				delete(m, prev.name)
				if prev.name.Protocol == v1.ProtocolUDP {
					res.DeletedUDPServicePorts = append(res.DeletedUDPServicePorts, prev.port)
					deletedNames = append(deletedNames, prev.name)
				}
			}
		}
		for _, cur := range change.current {
			m[cur.name] = cur.port
		}
	}
	if len(deletedNames) > 1 {
		sortPortsByName(deletedNames, res.DeletedUDPServicePorts)
	}
	// A cluster IP that moved from one UDP service port to another is
	// still served: its conntrack entries may stay.
	if res.DeletedUDPClusterIPs.Len() > 0 {
		for _, change := range changes {
			for _, cur := range change.current {
				if cur.name.Protocol == v1.ProtocolUDP {
					res.DeletedUDPClusterIPs.Delete(cur.port.ClusterIP())
				}
			}
		}
	}
	return res, changes
}

// HealthCheckNodePorts returns the health-check node port of every service
// that has one (externalTrafficPolicy Local load balancers). It walks the
// whole map.
func (m ServicePortMap) HealthCheckNodePorts() map[types.NamespacedName]uint16 {
	out := make(map[types.NamespacedName]uint16)
	for name, sp := range m {
		if p := sp.HealthCheckNodePort(); p != 0 {
			out[name.NamespacedName] = uint16(p)
		}
	}
	return out
}

// Skipped returns how many invalid fields and ports were logged and
// skipped since the tracker was created.
func (t *ServiceChangeTracker) Skipped() uint64 { return t.skipped.Load() }

// OtherFamily returns how many services are skipped now because every
// cluster IP they have is of the other IP family (an IPv6-only service
// seen by an IPv4 tracker). Each is logged once, at V(2), when first seen
// so (again after it was served or deleted). In a dual-stack proxy the
// other family's tracker serves them.
func (t *ServiceChangeTracker) OtherFamily() int {
	t.famMu.Lock()
	defer t.famMu.Unlock()
	return len(t.otherFamily)
}

// noteOtherFamily records and logs (once) a service none of whose
// parsable cluster IPs is of the tracker's family.
func (t *ServiceChangeTracker) noteOtherFamily(svc *v1.Service, nn types.NamespacedName) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	other := false
	for _, s := range ips {
		if a, ok := parseIP(s); ok && familyOf(a) != t.family {
			other = true
		}
	}
	if !other {
		return // no parsable cluster IP at all: clusterIP logged that
	}
	t.famMu.Lock()
	_, seen := t.otherFamily[nn]
	t.otherFamily[nn] = struct{}{}
	t.famMu.Unlock()
	if !seen {
		t.log.V(2).Info("Skipping a service: none of its cluster IPs is of this proxy's IP family", "service", nn, "ipFamily", t.family, "clusterIPs", ips)
	}
}

func (t *ServiceChangeTracker) forgetOtherFamily(nn types.NamespacedName) {
	t.famMu.Lock()
	delete(t.otherFamily, nn)
	t.famMu.Unlock()
}

// servicePorts builds the ports of svc for the tracker's family, sorted by
// name then protocol; nil if the service is skipped or has no cluster IP of
// this family. report says whether invalid input is logged and counted.
func (t *ServiceChangeTracker) servicePorts(svc *v1.Service, report bool) servicePorts {
	if svc == nil || proxy.ShouldSkipService(svc, t.proxyName) {
		return nil
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	var log reporter
	if report {
		log = reporter{log: t.log, count: &t.skipped, service: nn, family: t.family, withService: true}
	}
	clusterIP, ok := t.clusterIP(svc, log)
	if report {
		if ok {
			t.forgetOtherFamily(nn)
		} else {
			t.noteOtherFamily(svc, nn)
		}
	}
	if !ok {
		return nil
	}
	if len(svc.Spec.Ports) == 0 {
		return nil
	}

	// Fields shared by every port of the service are built once and
	// shared (read-only) between the ports.
	shared := proxy.BaseServicePort{
		ClusterIPAddr:            clusterIP,
		SessionAffinity:          svc.Spec.SessionAffinity,
		ExternalIPAddrs:          t.externalIPs(svc, log),
		LoadBalancerVIPAddrs:     t.loadBalancerVIPs(svc, log),
		LoadBalancerRanges:       t.sourceRanges(svc, log),
		ExternalLocal:            externalPolicyLocal(svc),
		InternalLocal:            svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		TrafficDistributionValue: derefString(svc.Spec.TrafficDistribution),
		HintsAnnotationValue:     hintsAnnotation(svc),
		AnnotationsValue:         svc.Annotations,
	}
	if shared.SessionAffinity == "" {
		shared.SessionAffinity = v1.ServiceAffinityNone
	}
	if shared.SessionAffinity == v1.ServiceAffinityClientIP {
		shared.StickyMaxAge = defaultStickyMaxAgeSeconds
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			if s := *c.ClientIP.TimeoutSeconds; s > 0 && s <= 86400 {
				shared.StickyMaxAge = int(s)
			} else {
				log.skip("Ignoring out-of-range session affinity timeout, using the default", "timeoutSeconds", s, "default", defaultStickyMaxAgeSeconds)
			}
		}
	}
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer && shared.ExternalLocal {
		switch p := svc.Spec.HealthCheckNodePort; {
		case p == 0:
			log.skip("Service has externalTrafficPolicy Local but no healthCheckNodePort")
		case p < 0 || p > 65535:
			log.skip("Ignoring out-of-range healthCheckNodePort", "healthCheckNodePort", p)
		default:
			shared.HealthCheckNodePortNum = int(p)
		}
	}

	m := make(servicePorts, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		port := &svc.Spec.Ports[i]
		if port.Port <= 0 || port.Port > 65535 {
			log.skip("Skipping service port with out-of-range port number", "portName", port.Name, "port", port.Port)
			continue
		}
		proto := port.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		if proto != v1.ProtocolTCP && proto != v1.ProtocolUDP && proto != v1.ProtocolSCTP {
			log.skip("Skipping service port with unknown protocol", "portName", port.Name, "protocol", proto)
			continue
		}
		name := proxy.ServicePortName{NamespacedName: nn, Port: port.Name, Protocol: proto}
		if _, dup := m.get(name); dup {
			log.skip("Skipping duplicate service port", "servicePort", name)
			continue
		}
		base := shared
		base.PortNum = int(port.Port)
		base.ProtocolValue = proto
		if np := port.NodePort; np != 0 {
			if np < 0 || np > 65535 {
				log.skip("Ignoring out-of-range node port", "portName", port.Name, "nodePort", np)
			} else {
				base.NodePortNum = int(np)
			}
		}
		var sp proxy.ServicePort = &base
		if t.makeServicePort != nil {
			sp = t.makeServicePort(port, svc, &base)
		}
		m = append(m, namedPort{name: name, port: sp})
	}
	if len(m) == 0 {
		return nil
	}
	if len(m) > 1 {
		slices.SortFunc(m, func(a, b namedPort) int { return comparePortNames(a.name, b.name) })
	}
	return m
}

// clusterIP picks the service's cluster IP of the tracker's family from
// spec.clusterIPs (or spec.clusterIP when clusterIPs is unset).
func (t *ServiceChangeTracker) clusterIP(svc *v1.Service, log reporter) (netip.Addr, bool) {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		a, ok := parseIP(s)
		if !ok {
			log.skip("Ignoring unparsable cluster IP", "clusterIP", s)
			continue
		}
		if familyOf(a) == t.family {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (t *ServiceChangeTracker) externalIPs(svc *v1.Service, log reporter) []netip.Addr {
	var out []netip.Addr
	for _, s := range svc.Spec.ExternalIPs {
		a, ok := parseIP(s)
		if !ok {
			log.skip("Ignoring unparsable external IP", "externalIP", s)
			continue
		}
		if familyOf(a) == t.family {
			out = append(out, a)
		}
	}
	return out
}

func (t *ServiceChangeTracker) loadBalancerVIPs(svc *v1.Service, log reporter) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue // hostname-only ingress: nothing to program
		}
		if ing.IPMode != nil && *ing.IPMode == v1.LoadBalancerIPModeProxy {
			continue // the load balancer proxies: traffic arrives for the node, not the VIP
		}
		a, ok := parseIP(ing.IP)
		if !ok {
			log.skip("Ignoring unparsable load-balancer ingress IP", "ip", ing.IP)
			continue
		}
		if familyOf(a) == t.family {
			out = append(out, a)
		}
	}
	return out
}

func (t *ServiceChangeTracker) sourceRanges(svc *v1.Service, log reporter) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		p, ok := parsePrefix(s)
		if !ok {
			log.skip("Ignoring unparsable load-balancer source range", "sourceRange", s)
			continue
		}
		if familyOf(p.Addr()) != t.family {
			continue
		}
		if p.Bits() == 0 {
			// 0.0.0.0/0 or ::/0 allows everyone: same as no ranges.
			return nil
		}
		out = append(out, p)
	}
	return out
}

// externalPolicyLocal: externalTrafficPolicy Local only counts for a
// service reachable from outside the cluster.
func externalPolicyLocal(svc *v1.Service) bool {
	if svc.Spec.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal {
		return false
	}
	switch svc.Spec.Type {
	case v1.ServiceTypeLoadBalancer, v1.ServiceTypeNodePort:
		return true
	case v1.ServiceTypeClusterIP, "":
		return len(svc.Spec.ExternalIPs) > 0
	}
	return false
}

// hintsAnnotation returns the topology-mode annotation, or the deprecated
// topology-aware-hints one when the first is absent.
func hintsAnnotation(svc *v1.Service) string {
	if v, ok := svc.Annotations[proxy.AnnotationTopologyMode]; ok {
		return v
	}
	return svc.Annotations[proxy.AnnotationTopologyAwareHints]
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sortPortsByName sorts ports by their names (names[i] is ports[i]'s), by
// namespace, name, port name, then protocol.
func sortPortsByName(names []proxy.ServicePortName, ports []proxy.ServicePort) {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		na, nb := names[a], names[b]
		return cmp.Or(cmp.Compare(na.Namespace, nb.Namespace), cmp.Compare(na.Name, nb.Name), comparePortNames(na, nb))
	})
	sorted := make([]proxy.ServicePort, len(ports))
	for i, j := range idx {
		sorted[i] = ports[j]
	}
	copy(ports, sorted)
}
