package changetracker

import (
	"cmp"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
	"net/netip"
)

// EndpointsChangeTracker records EndpointSlice changes between syncs, for
// one IP family, in a cache of every slice (per service, per slice name)
// reduced to what the proxy uses. Its methods are safe for concurrent use.
type EndpointsChangeTracker struct {
	family       v1.IPFamily
	addressType  discovery.AddressType
	nodeName     string
	filter       proxy.EndpointFilter
	makeEndpoint MakeEndpointFunc
	log          logr.Logger

	skipped atomic.Uint64

	mu       sync.Mutex
	services map[types.NamespacedName]*sliceTracker
	// dirty holds the services with pending slice changes, so applying
	// costs O(changed services), never O(all services).
	dirty        sets.Set[types.NamespacedName]
	pendingCount int
	// triggerTimes are the last-change-trigger-time annotations of the
	// pending changes, per service (for the network programming latency).
	triggerTimes map[types.NamespacedName][]time.Time
	// started: trigger times before it are not reported (they belong to
	// changes made before this proxy ran, as kube-proxy does).
	started time.Time
}

// sliceTracker holds one service's slices: as applied to the EndpointsMap,
// and changes reported since.
type sliceTracker struct {
	applied namedSlices
	// pending: a nil info means "remove this slice". Nil when nothing is
	// pending (most services, most of the time).
	pending namedSlices
	// built is the EndpointsMap part built from applied, kept so that the
	// next apply need not rebuild the "before" state.
	built serviceEndpoints
}

// sliceInfo is an EndpointSlice reduced to the fields the proxy uses, with
// addresses of the other family and those the Filter rejects dropped, and
// endpoints sorted, so that DeepEqual says whether a slice changed anything.
//
// The endpoints are kept as the BaseEndpoint values the EndpointsMap hands
// out: when the slice has exactly one port, PortNum is already that port and
// a service with that one slice uses these values as they are (no copy);
// otherwise PortNum is 0 and each port gets its own copies. A sliceInfo is
// never modified once built.
type sliceInfo struct {
	ports     []portInfo
	endpoints []proxy.BaseEndpoint
}

// namedSlice is one slice's reduced content under the slice's name.
type namedSlice struct {
	name string
	info *sliceInfo
}

// namedSlices are a service's slices sorted by name (a map per service
// would cost far more memory: most services have one slice).
type namedSlices []namedSlice

func (s namedSlices) find(name string) (int, bool) {
	return slices.BinarySearchFunc(s, name, func(e namedSlice, n string) int { return cmp.Compare(e.name, n) })
}

// get returns the named slice's info and whether it is listed.
func (s namedSlices) get(name string) (*sliceInfo, bool) {
	if i, ok := s.find(name); ok {
		return s[i].info, true
	}
	return nil, false
}

// set adds or replaces the named slice.
func (s *namedSlices) set(name string, info *sliceInfo) {
	i, ok := s.find(name)
	if ok {
		(*s)[i].info = info
		return
	}
	*s = slices.Insert(*s, i, namedSlice{name: name, info: info})
}

// remove drops the named slice, if listed.
func (s *namedSlices) remove(name string) {
	if i, ok := s.find(name); ok {
		*s = slices.Delete(*s, i, i+1)
	}
}

type portInfo struct {
	name     string
	port     int
	protocol v1.Protocol
}

// portEndpoints is one service port's endpoints, as built from its slices.
type portEndpoints struct {
	name proxy.ServicePortName
	eps  []proxy.Endpoint
}

// serviceEndpoints is one service's endpoints per port, sorted by port
// name then protocol (a map per service would cost far more memory: most
// services have one port).
type serviceEndpoints []portEndpoints

func comparePortNames(a, b proxy.ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}

// get returns the endpoints of one port of the service (nil if none).
func (s serviceEndpoints) get(name proxy.ServicePortName) []proxy.Endpoint {
	if len(s) == 1 {
		if s[0].name == name {
			return s[0].eps
		}
		return nil
	}
	i, found := slices.BinarySearchFunc(s, name, func(p portEndpoints, n proxy.ServicePortName) int {
		return comparePortNames(p.name, n)
	})
	if !found || s[i].name != name {
		return nil
	}
	return s[i].eps
}

// NewEndpointsChangeTracker returns a tracker for cfg.IPFamily. An unknown
// family is logged and treated as IPv4.
func NewEndpointsChangeTracker(cfg EndpointsTrackerConfig) *EndpointsChangeTracker {
	fam := cfg.IPFamily
	if fam != v1.IPv4Protocol && fam != v1.IPv6Protocol {
		cfg.Logger.Error(nil, "Unknown IP family for endpoints change tracker, using IPv4", "ipFamily", fam)
		fam = v1.IPv4Protocol
	}
	at := discovery.AddressTypeIPv4
	if fam == v1.IPv6Protocol {
		at = discovery.AddressTypeIPv6
	}
	return &EndpointsChangeTracker{
		family:       fam,
		addressType:  at,
		nodeName:     cfg.NodeName,
		filter:       cfg.Filter,
		makeEndpoint: cfg.MakeEndpoint,
		log:          cfg.Logger,
		services:     make(map[types.NamespacedName]*sliceTracker),
		dirty:        sets.New[types.NamespacedName](),
		triggerTimes: make(map[types.NamespacedName][]time.Time),
		started:      time.Now(),
	}
}

// EndpointSliceUpdate records an added or updated slice (removeSlice false)
// or a deleted one (true), and reports whether this changed the pending
// state: false when the slice is ignored (no kubernetes.io/service-name
// label, no name, an FQDN or other-family slice) or carries nothing new
// (e.g. only a change to fields the proxy does not use, or to endpoints the
// Filter drops). A slice that returns to its applied state cancels its
// pending change.
func (t *EndpointsChangeTracker) EndpointSliceUpdate(slice *discovery.EndpointSlice, removeSlice bool) bool {
	if slice == nil {
		return false
	}
	svcName := slice.Labels[discovery.LabelServiceName]
	if svcName == "" || slice.Name == "" {
		t.log.V(2).Info("Ignoring EndpointSlice without a service-name label or name", "endpointSlice", types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}, "label", discovery.LabelServiceName)
		return false
	}
	if slice.AddressType != t.addressType {
		// FQDN slices are never proxied; slices of the other family
		// belong to the other tracker. (addressType is immutable, but be
		// safe with objects from files: drop any cached copy.)
		removeSlice = true
	}
	nn := types.NamespacedName{Namespace: slice.Namespace, Name: svcName}
	var info *sliceInfo
	if !removeSlice {
		info = t.newSliceInfo(slice, nn)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.services[nn]
	if st == nil {
		if removeSlice {
			return false
		}
		st = &sliceTracker{}
		t.services[nn] = st
	}
	applied, isApplied := st.applied.get(slice.Name)
	pending, isPending := st.pending.get(slice.Name)
	switch {
	case isPending && sliceInfoEqual(pending, info):
		return false
	case !isPending && isApplied && sliceInfoEqual(applied, info):
		return false
	case !isPending && !isApplied && removeSlice:
		return false
	}
	if (isApplied && sliceInfoEqual(applied, info)) || (!isApplied && removeSlice) {
		// Back to the applied state: nothing left to do for this slice.
		st.pending.remove(slice.Name)
		t.pendingCount--
		if len(st.pending) == 0 {
			t.dirty.Delete(nn)
			delete(t.triggerTimes, nn)
			if len(st.applied) == 0 {
				delete(t.services, nn)
			}
		}
		return true
	}
	if !isPending {
		t.pendingCount++
	}
	st.pending.set(slice.Name, info)
	t.dirty.Insert(nn)
	if v := t.log.V(4); v.Enabled() { // its timestamp starts a change's way to the node
		v.Info("Recorded an EndpointSlice change", "endpointSlice", types.NamespacedName{Namespace: slice.Namespace, Name: slice.Name}, "service", nn, "removed", removeSlice)
	}
	if !removeSlice {
		if tt, ok := triggerTime(slice); ok && !tt.Before(t.started) {
			t.triggerTimes[nn] = append(t.triggerTimes[nn], tt)
		}
	}
	return true
}

// triggerTime reads a slice's endpoints.kubernetes.io/last-change-trigger-time
// annotation (set by the EndpointSlice controller to when the change that
// caused it happened).
func triggerTime(slice *discovery.EndpointSlice) (time.Time, bool) {
	v, ok := slice.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}, false
	}
	tt, err := time.Parse(time.RFC3339Nano, v)
	return tt, err == nil
}

// Skipped returns how many invalid ports and addresses were logged and
// skipped since the tracker was created.
func (t *EndpointsChangeTracker) Skipped() uint64 { return t.skipped.Load() }

func (t *EndpointsChangeTracker) skip(msg string, keysAndValues ...any) {
	reporter{log: t.log, count: &t.skipped}.skip(msg, keysAndValues...)
}

// Pending returns the number of slices with an unapplied change.
func (t *EndpointsChangeTracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingCount
}

func sliceInfoEqual(a, b *sliceInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// newSliceInfo reduces a slice. Ports with no or an out-of-range number
// are logged and skipped; so are unparsable addresses.
func (t *EndpointsChangeTracker) newSliceInfo(slice *discovery.EndpointSlice, nn types.NamespacedName) *sliceInfo {
	info := &sliceInfo{}
	if len(slice.Ports) > 0 {
		info.ports = make([]portInfo, 0, len(slice.Ports))
	}
	for _, p := range slice.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
			t.skip("Ignoring EndpointSlice port without a valid number", "service", nn, "endpointSlice", slice.Name, "portName", name)
			continue
		}
		proto := v1.ProtocolTCP
		if p.Protocol != nil && *p.Protocol != "" {
			proto = *p.Protocol
		}
		info.ports = append(info.ports, portInfo{name: name, port: int(*p.Port), protocol: proto})
	}
	if len(info.ports) > 1 {
		slices.SortFunc(info.ports, func(a, b portInfo) int {
			return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.protocol, b.protocol), cmp.Compare(a.port, b.port))
		})
	}
	// With one port the endpoints carry its number, so that a service
	// with only this slice can use them as they are (see sliceInfo).
	portNum := 0
	if len(info.ports) == 1 {
		portNum = info.ports[0].port
	}
	if len(slice.Endpoints) > 0 {
		info.endpoints = make([]proxy.BaseEndpoint, 0, len(slice.Endpoints))
	}
	for i := range slice.Endpoints {
		ep := &slice.Endpoints[i]
		if len(ep.Addresses) == 0 {
			continue
		}
		// Only the first address is used: the API defines the others as
		// fungible and every proxy implementation ignores them.
		addr, ok := parseIP(ep.Addresses[0])
		if !ok {
			t.skip("Ignoring EndpointSlice endpoint with an unparsable address", "service", nn, "endpointSlice", slice.Name, "address", ep.Addresses[0])
			continue
		}
		if familyOf(addr) != t.family || !t.filter.Allows(addr) {
			continue
		}
		ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
		serving := ready
		if ep.Conditions.Serving != nil {
			serving = *ep.Conditions.Serving
		}
		e := proxy.BaseEndpoint{
			Addr:        addr,
			PortNum:     portNum,
			Ready:       ready,
			Serving:     serving,
			Terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
			Node:        derefString(ep.NodeName),
			ZoneName:    derefString(ep.Zone),
		}
		e.Local = t.nodeName != "" && e.Node == t.nodeName
		if ep.Hints != nil {
			if len(ep.Hints.ForZones) > 0 {
				e.Zones = make(sets.Set[string], len(ep.Hints.ForZones))
				for _, z := range ep.Hints.ForZones {
					e.Zones.Insert(z.Name)
				}
			}
			if len(ep.Hints.ForNodes) > 0 {
				e.Nodes = make(sets.Set[string], len(ep.Hints.ForNodes))
				for _, n := range ep.Hints.ForNodes {
					e.Nodes.Insert(n.Name)
				}
			}
		}
		info.endpoints = append(info.endpoints, e)
	}
	// Slices usually list their endpoints in address order already.
	byAddr := func(a, b proxy.BaseEndpoint) int { return a.Addr.Compare(b.Addr) }
	if !slices.IsSortedFunc(info.endpoints, byAddr) {
		slices.SortStableFunc(info.endpoints, byAddr)
	}
	return info
}

// endpointsChange is one service's endpoints before and after an apply.
type endpointsChange struct {
	previous, current serviceEndpoints
}

// Update applies the pending slice changes of t to m (which must be
// non-nil: start from make(EndpointsMap)) and reports what changed. Its
// cost is proportional to the size of the changed services (their slices),
// never to the number of services. Apply one tracker's changes to one map
// only: the tracker remembers what it last applied.
func (m EndpointsMap) Update(t *EndpointsChangeTracker) UpdateEndpointsMapResult {
	res, _ := m.apply(t)
	return res
}

func (m EndpointsMap) apply(t *EndpointsChangeTracker) (UpdateEndpointsMapResult, map[types.NamespacedName]*endpointsChange) {
	changes, triggers := t.checkoutChanges()
	res := UpdateEndpointsMapResult{
		UpdatedServices:        make(sets.Set[types.NamespacedName], len(changes)),
		LocalReadyEndpoints:    make(map[types.NamespacedName]int, len(changes)),
		LastChangeTriggerTimes: triggers,
	}
	for nn, change := range changes {
		if len(change.previous) == len(change.current) && reflect.DeepEqual(change.previous, change.current) {
			delete(changes, nn)
			continue
		}
		res.UpdatedServices.Insert(nn)
		for _, p := range change.previous {
			if change.current.get(p.name) == nil {
				delete(m, p.name)
			}
		}
		for _, p := range change.current {
			m[p.name] = p.eps
		}
		detectStaleUDP(change.previous, change.current, &res)
		res.LocalReadyEndpoints[nn] = localReadyIPs(change.current)
	}
	sortResult(&res)
	return res, changes
}

// checkoutChanges moves pending slices to applied for every dirty service
// and returns each one's endpoints before and after.
func (t *EndpointsChangeTracker) checkoutChanges() (map[types.NamespacedName]*endpointsChange, map[types.NamespacedName][]time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var triggers map[types.NamespacedName][]time.Time
	if len(t.triggerTimes) > 0 {
		triggers, t.triggerTimes = t.triggerTimes, make(map[types.NamespacedName][]time.Time)
	}
	changes := make(map[types.NamespacedName]*endpointsChange, t.dirty.Len())
	// One allocation for all the changes of this apply.
	all := make([]endpointsChange, t.dirty.Len())
	for nn := range t.dirty {
		st := t.services[nn]
		if st == nil {
			continue
		}
		change := &all[0]
		all = all[1:]
		change.previous = st.built
		if len(st.applied) == 0 && !slices.ContainsFunc(st.pending, func(p namedSlice) bool { return p.info == nil }) {
			// Nothing applied yet (a new service): pending becomes applied.
			st.applied, st.pending = st.pending, nil
		}
		for _, p := range st.pending {
			if p.info == nil {
				st.applied.remove(p.name)
			} else {
				st.applied.set(p.name, p.info)
			}
		}
		st.pending = nil
		change.current = t.buildEndpoints(nn, st.applied)
		st.built = change.current
		if len(st.applied) == 0 {
			delete(t.services, nn)
		}
		changes[nn] = change
	}
	t.dirty = sets.New[types.NamespacedName]()
	t.pendingCount = 0
	return changes, triggers
}

// buildEndpoints merges a service's slices into its endpoints per port.
// Slices are visited in name order and an ip:port found in several slices
// is kept once, preferring a ready copy, then a serving one, then a local
// one, then the first, so the result depends only on the slices' content.
func (t *EndpointsChangeTracker) buildEndpoints(nn types.NamespacedName, applied namedSlices) serviceEndpoints {
	switch len(applied) {
	case 0:
		return nil
	case 1:
		if out, ok := t.buildOneSlice(nn, applied[0].info); ok {
			return out
		}
	}

	type candidate struct {
		key  netip.AddrPort
		info *proxy.BaseEndpoint
	}
	byPort := make(map[proxy.ServicePortName][]candidate, 1)
	for _, sl := range applied { // in name order
		info := sl.info
		for _, p := range info.ports {
			spn := proxy.ServicePortName{NamespacedName: nn, Port: p.name, Protocol: p.protocol}
			list := byPort[spn]
			if list == nil {
				list = make([]candidate, 0, len(info.endpoints))
			}
			for i := range info.endpoints {
				e := &info.endpoints[i]
				list = append(list, candidate{netip.AddrPortFrom(e.Addr, uint16(p.port)), e})
			}
			byPort[spn] = list
		}
	}
	out := make(serviceEndpoints, 0, len(byPort))
	for spn, list := range byPort {
		if len(list) == 0 {
			continue
		}
		// Stable: among duplicates, slice-name order decides ties.
		slices.SortStableFunc(list, func(a, b candidate) int { return a.key.Compare(b.key) })
		kept := list[:1]
		for _, c := range list[1:] {
			last := &kept[len(kept)-1]
			if c.key == last.key {
				if better(c.info, last.info) {
					*last = c
				}
				continue
			}
			kept = append(kept, c)
		}
		// One allocation for all the port's base endpoints.
		bases := make([]proxy.BaseEndpoint, len(kept))
		for i, c := range kept {
			bases[i] = *c.info
			bases[i].PortNum = int(c.key.Port())
		}
		// (out is sorted below: the hook gets its own copy of the name.)
		out = append(out, portEndpoints{name: spn, eps: t.wrap(&spn, bases)})
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b portEndpoints) int { return comparePortNames(a.name, b.name) })
	return out
}

// buildOneSlice is buildEndpoints for a service with one slice (nearly
// every service): its endpoints are sorted by address already, so each port
// needs no merge, and a one-port slice's endpoints are used as they are. It
// reports false, for the general merge, when the slice lists one port name
// and protocol twice (with two numbers).
func (t *EndpointsChangeTracker) buildOneSlice(nn types.NamespacedName, info *sliceInfo) (serviceEndpoints, bool) {
	for i := 1; i < len(info.ports); i++ {
		if info.ports[i].name == info.ports[i-1].name && info.ports[i].protocol == info.ports[i-1].protocol {
			return nil, false
		}
	}
	if len(info.endpoints) == 0 || len(info.ports) == 0 {
		return nil, true
	}
	dups := false
	for i := 1; i < len(info.endpoints); i++ {
		if info.endpoints[i].Addr == info.endpoints[i-1].Addr {
			dups = true
			break
		}
	}
	out := make(serviceEndpoints, 0, len(info.ports))
	for _, p := range info.ports {
		spn := proxy.ServicePortName{NamespacedName: nn, Port: p.name, Protocol: p.protocol}
		var bases []proxy.BaseEndpoint
		switch {
		case len(info.ports) == 1 && !dups:
			bases = info.endpoints // PortNum is set already
		case !dups:
			bases = make([]proxy.BaseEndpoint, len(info.endpoints))
			copy(bases, info.endpoints)
			for i := range bases {
				bases[i].PortNum = p.port
			}
		default:
			bases = make([]proxy.BaseEndpoint, 0, len(info.endpoints))
			for i := range info.endpoints {
				e := &info.endpoints[i]
				if n := len(bases); n > 0 && bases[n-1].Addr == e.Addr {
					if better(e, &bases[n-1]) {
						bases[n-1] = *e
						bases[n-1].PortNum = p.port
					}
					continue
				}
				bases = append(bases, *e)
				bases[len(bases)-1].PortNum = p.port
			}
		}
		// The hook gets a pointer into out (its capacity is final), not
		// to a copy of the name that would escape.
		out = append(out, portEndpoints{name: spn})
		last := &out[len(out)-1]
		last.eps = t.wrap(&last.name, bases)
	}
	return out, true
}

// wrap hands out one port's base endpoints, through MakeEndpoint if set.
func (t *EndpointsChangeTracker) wrap(spn *proxy.ServicePortName, bases []proxy.BaseEndpoint) []proxy.Endpoint {
	eps := make([]proxy.Endpoint, len(bases))
	for i := range bases {
		if t.makeEndpoint != nil {
			eps[i] = t.makeEndpoint(&bases[i], spn)
		} else {
			eps[i] = &bases[i]
		}
	}
	return eps
}

// better reports whether duplicate a (the same IP and port, in one or two
// slices) should replace b. A pod that is not terminating wins over one that
// is, whatever their other conditions, as in kube-proxy v1.37
// (kubernetes#135593): the pod network may hand a terminating pod's IP to a
// new pod before the old Pod object is gone, and the endpoint is then the
// new pod's, not yet ready perhaps, not the old one's, still serving. The
// remaining ties prefer ready, then serving, then local, so that the result
// never depends on the order the slices arrived in.
func better(a, b *proxy.BaseEndpoint) bool {
	if a.Terminating != b.Terminating {
		return !a.Terminating
	}
	if a.Ready != b.Ready {
		return a.Ready
	}
	if a.Serving != b.Serving {
		return a.Serving
	}
	return a.Local && !b.Local
}

// detectStaleUDP finds UDP endpoints that were serving and no longer are
// (removed, or no longer serving: for an endpoint that is not terminating
// that is the ready condition), and UDP ports that went from no serving
// endpoint to some. A ready endpoint that starts terminating but still
// serves keeps its conntrack entries, as in kube-proxy, so that existing
// flows drain gracefully.
func detectStaleUDP(previous, current serviceEndpoints, res *UpdateEndpointsMapResult) {
	for _, p := range previous {
		if p.name.Protocol != v1.ProtocolUDP {
			continue
		}
		now := current.get(p.name)
		for _, ep := range p.eps {
			if !ep.IsServing() {
				continue
			}
			if nep := findEndpoint(now, ep); nep == nil || !nep.IsServing() {
				res.DeletedUDPEndpoints = append(res.DeletedUDPEndpoints, proxy.ServiceEndpoint{Endpoint: ep.String(), ServicePortName: p.name})
			}
		}
	}
	for _, p := range current {
		if p.name.Protocol != v1.ProtocolUDP {
			continue
		}
		if anyServing(p.eps) && !anyServing(previous.get(p.name)) {
			res.NewlyActiveUDPServices = append(res.NewlyActiveUDPServices, p.name)
		}
	}
}

// findEndpoint finds ep's ip:port in a list sorted by ip, then port.
func findEndpoint(list []proxy.Endpoint, ep proxy.Endpoint) proxy.Endpoint {
	key := netip.AddrPortFrom(ep.IP(), uint16(ep.Port()))
	i, found := slices.BinarySearchFunc(list, key, func(e proxy.Endpoint, k netip.AddrPort) int {
		return netip.AddrPortFrom(e.IP(), uint16(e.Port())).Compare(k)
	})
	if !found {
		return nil
	}
	return list[i]
}

func anyServing(eps []proxy.Endpoint) bool {
	for _, ep := range eps {
		if ep.IsServing() {
			return true
		}
	}
	return false
}

// localReadyIPs counts the distinct addresses of ready local endpoints of
// one service (over all its ports): what its health-check node port
// reports. Terminating endpoints do not count, so a node whose local pods
// are all shutting down fails the load balancer's health check.
func localReadyIPs(s serviceEndpoints) int {
	if len(s) == 1 {
		// One port (most services): the list is sorted by address, so
		// copies of an address are adjacent and no set is needed.
		n, last := 0, netip.Addr{}
		for _, ep := range s[0].eps {
			if ep.IsLocal() && ep.IsReady() && (n == 0 || ep.IP() != last) {
				n++
				last = ep.IP()
			}
		}
		return n
	}
	var seen []netip.Addr
	for _, p := range s {
		for _, ep := range p.eps {
			if ep.IsLocal() && ep.IsReady() && !slices.Contains(seen, ep.IP()) {
				seen = append(seen, ep.IP())
			}
		}
	}
	return len(seen)
}

// LocalReadyEndpoints returns, for every service with at least one ready
// local endpoint, the number of distinct such addresses. It walks the whole
// map; per-sync callers should prefer UpdateEndpointsMapResult.LocalReadyEndpoints.
func (m EndpointsMap) LocalReadyEndpoints() map[types.NamespacedName]int {
	ips := make(map[types.NamespacedName]sets.Set[netip.Addr])
	for spn, eps := range m {
		for _, ep := range eps {
			if !ep.IsLocal() || !ep.IsReady() {
				continue
			}
			s := ips[spn.NamespacedName]
			if s == nil {
				s = sets.New[netip.Addr]()
				ips[spn.NamespacedName] = s
			}
			s.Insert(ep.IP())
		}
	}
	out := make(map[types.NamespacedName]int, len(ips))
	for nn, s := range ips {
		out[nn] = s.Len()
	}
	return out
}

// sortResult makes result lists deterministic.
func sortResult(res *UpdateEndpointsMapResult) {
	slices.SortFunc(res.DeletedUDPEndpoints, func(a, b proxy.ServiceEndpoint) int {
		return cmp.Or(cmp.Compare(a.ServicePortName.String(), b.ServicePortName.String()), cmp.Compare(a.Endpoint, b.Endpoint))
	})
	slices.SortFunc(res.NewlyActiveUDPServices, func(a, b proxy.ServicePortName) int {
		return cmp.Compare(a.String(), b.String())
	})
}
