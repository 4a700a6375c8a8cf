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
	applied map[string]*sliceInfo
	// pending: a nil value means "remove this slice".
	pending map[string]*sliceInfo
	// built is the EndpointsMap part built from applied, kept so that the
	// next apply need not rebuild the "before" state.
	built EndpointsMap
}

// sliceInfo is an EndpointSlice reduced to the fields the proxy uses, with
// addresses of the other family and those the Filter rejects dropped, and
// endpoints sorted, so that DeepEqual says whether a slice changed anything.
type sliceInfo struct {
	ports     []portInfo
	endpoints []endpointInfo
}

type portInfo struct {
	name     string
	port     int
	protocol v1.Protocol
}

type endpointInfo struct {
	addr        netip.Addr
	ready       bool
	serving     bool
	terminating bool
	local       bool
	nodeName    string
	zone        string
	zoneHints   sets.Set[string]
	nodeHints   sets.Set[string]
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
		st = &sliceTracker{applied: map[string]*sliceInfo{}, pending: map[string]*sliceInfo{}}
		t.services[nn] = st
	}
	applied, isApplied := st.applied[slice.Name]
	pending, isPending := st.pending[slice.Name]
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
		delete(st.pending, slice.Name)
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
	st.pending[slice.Name] = info
	t.dirty.Insert(nn)
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
	reporter{t.log, &t.skipped}.skip(msg, keysAndValues...)
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
	slices.SortFunc(info.ports, func(a, b portInfo) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.protocol, b.protocol), cmp.Compare(a.port, b.port))
	})
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
		e := endpointInfo{
			addr:        addr,
			ready:       ready,
			serving:     serving,
			terminating: ep.Conditions.Terminating != nil && *ep.Conditions.Terminating,
			nodeName:    derefString(ep.NodeName),
			zone:        derefString(ep.Zone),
		}
		e.local = t.nodeName != "" && e.nodeName == t.nodeName
		if ep.Hints != nil {
			if len(ep.Hints.ForZones) > 0 {
				e.zoneHints = sets.New[string]()
				for _, z := range ep.Hints.ForZones {
					e.zoneHints.Insert(z.Name)
				}
			}
			if len(ep.Hints.ForNodes) > 0 {
				e.nodeHints = sets.New[string]()
				for _, n := range ep.Hints.ForNodes {
					e.nodeHints.Insert(n.Name)
				}
			}
		}
		info.endpoints = append(info.endpoints, e)
	}
	slices.SortStableFunc(info.endpoints, func(a, b endpointInfo) int { return a.addr.Compare(b.addr) })
	return info
}

// endpointsChange is one service's endpoints before and after an apply.
type endpointsChange struct {
	previous, current EndpointsMap
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
		UpdatedServices:        sets.New[types.NamespacedName](),
		LocalReadyEndpoints:    make(map[types.NamespacedName]int),
		LastChangeTriggerTimes: triggers,
	}
	for nn, change := range changes {
		if reflect.DeepEqual(change.previous, change.current) {
			delete(changes, nn)
			continue
		}
		res.UpdatedServices.Insert(nn)
		for name := range change.previous {
			if _, ok := change.current[name]; !ok {
				delete(m, name)
			}
		}
		for name, eps := range change.current {
			m[name] = eps
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
	for nn := range t.dirty {
		st := t.services[nn]
		if st == nil {
			continue
		}
		change := &endpointsChange{previous: st.built}
		for name, info := range st.pending {
			if info == nil {
				delete(st.applied, name)
			} else {
				st.applied[name] = info
			}
		}
		clear(st.pending)
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
func (t *EndpointsChangeTracker) buildEndpoints(nn types.NamespacedName, applied map[string]*sliceInfo) EndpointsMap {
	if len(applied) == 0 {
		return nil
	}
	var names []string
	if len(applied) > 1 {
		names = make([]string, 0, len(applied))
		for name := range applied {
			names = append(names, name)
		}
		slices.Sort(names)
	} else {
		for name := range applied {
			names = []string{name}
		}
	}

	type candidate struct {
		key  netip.AddrPort
		info *endpointInfo
	}
	byPort := make(map[proxy.ServicePortName][]candidate, 1)
	for _, sliceName := range names {
		info := applied[sliceName]
		for _, p := range info.ports {
			spn := proxy.ServicePortName{NamespacedName: nn, Port: p.name, Protocol: p.protocol}
			list := byPort[spn]
			if list == nil {
				list = make([]candidate, 0, len(info.endpoints))
			}
			for i := range info.endpoints {
				e := &info.endpoints[i]
				list = append(list, candidate{netip.AddrPortFrom(e.addr, uint16(p.port)), e})
			}
			byPort[spn] = list
		}
	}
	out := make(EndpointsMap, len(byPort))
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
		eps := make([]proxy.Endpoint, len(kept))
		for i, c := range kept {
			bases[i] = proxy.BaseEndpoint{
				Addr:        c.info.addr,
				PortNum:     int(c.key.Port()),
				Local:       c.info.local,
				Ready:       c.info.ready,
				Serving:     c.info.serving,
				Terminating: c.info.terminating,
				Zones:       c.info.zoneHints,
				Nodes:       c.info.nodeHints,
				Node:        c.info.nodeName,
				ZoneName:    c.info.zone,
			}
			if t.makeEndpoint != nil {
				eps[i] = t.makeEndpoint(&bases[i], &spn)
			} else {
				eps[i] = &bases[i]
			}
		}
		out[spn] = eps
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// better reports whether duplicate a should replace b.
func better(a, b *endpointInfo) bool {
	if a.ready != b.ready {
		return a.ready
	}
	if a.serving != b.serving {
		return a.serving
	}
	return a.local && !b.local
}

// detectStaleUDP finds UDP endpoints that were serving and no longer are
// (removed, or no longer serving: for an endpoint that is not terminating
// that is the ready condition), and UDP ports that went from no serving
// endpoint to some. A ready endpoint that starts terminating but still
// serves keeps its conntrack entries, as in kube-proxy, so that existing
// flows drain gracefully.
func detectStaleUDP(previous, current EndpointsMap, res *UpdateEndpointsMapResult) {
	for spn, eps := range previous {
		if spn.Protocol != v1.ProtocolUDP {
			continue
		}
		for _, ep := range eps {
			if !ep.IsServing() {
				continue
			}
			if nep := findEndpoint(current[spn], ep); nep == nil || !nep.IsServing() {
				res.DeletedUDPEndpoints = append(res.DeletedUDPEndpoints, proxy.ServiceEndpoint{Endpoint: ep.String(), ServicePortName: spn})
			}
		}
	}
	for spn, eps := range current {
		if spn.Protocol != v1.ProtocolUDP {
			continue
		}
		if anyServing(eps) && !anyServing(previous[spn]) {
			res.NewlyActiveUDPServices = append(res.NewlyActiveUDPServices, spn)
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
func localReadyIPs(m EndpointsMap) int {
	var seen []netip.Addr
	for _, eps := range m {
		for _, ep := range eps {
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
