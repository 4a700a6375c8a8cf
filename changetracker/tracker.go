package changetracker

import (
	"maps"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
)

// Tracker is the service and endpoint-slice change trackers of one IP
// family plus this node's labels, behind the proxy handler interfaces.
// Engines embed a *Tracker and call Update from their sync.
//
// Handler methods are safe for concurrent use: each takes a lock, records,
// releases the lock and then calls Config.OnChange if the event changed
// anything. Update must be called from one goroutine at a time (the sync).
type Tracker struct {
	cfg      Config
	log      logr.Logger
	services *ServiceChangeTracker
	slices   *EndpointsChangeTracker

	// Owned by the Update goroutine.
	serviceMap   ServicePortMap
	endpointsMap EndpointsMap
	// Each service's current port names (kept for every service, so that
	// engines and the filtered view find a changed service's ports
	// without a walk over serviceMap).
	portsByName map[types.NamespacedName][]proxy.ServicePortName
	// With an active filter: the services that have endpoints of ours and
	// the filtered view of serviceMap.
	scoped       ServicePortMap
	inScope      sets.Set[types.NamespacedName]
	filterActive bool

	mu             sync.Mutex // guards the fields below
	servicesSynced bool
	slicesSynced   bool
	nodeLabels     map[string]string
	nodeChanged    bool
}

// New returns a Tracker for cfg.IPFamily (IPv4 when unset).
func New(cfg Config) *Tracker {
	if cfg.IPFamily == "" {
		cfg.IPFamily = v1.IPv4Protocol
	}
	t := &Tracker{
		cfg: cfg,
		log: cfg.Logger,
		services: NewServiceChangeTracker(ServiceTrackerConfig{
			IPFamily:         cfg.IPFamily,
			ServiceProxyName: cfg.ServiceProxyName,
			MakeServicePort:  cfg.MakeServicePort,
			Logger:           cfg.Logger,
		}),
		slices: NewEndpointsChangeTracker(EndpointsTrackerConfig{
			IPFamily:     cfg.IPFamily,
			NodeName:     cfg.NodeName,
			Filter:       cfg.Filter,
			MakeEndpoint: cfg.MakeEndpoint,
			Logger:       cfg.Logger,
		}),
		serviceMap:   make(ServicePortMap),
		portsByName:  make(map[types.NamespacedName][]proxy.ServicePortName),
		endpointsMap: make(EndpointsMap),
		filterActive: cfg.Filter.Active(),
	}
	if t.filterActive {
		t.scoped = make(ServicePortMap)
		t.inScope = sets.New[types.NamespacedName]()
	}
	return t
}

// IPFamily returns the family this tracker keeps.
func (t *Tracker) IPFamily() v1.IPFamily { return t.cfg.IPFamily }

func (t *Tracker) changed(kind Change) {
	if t.cfg.OnChange != nil {
		t.cfg.OnChange(kind)
	}
}

// OnServiceAdd records a new service.
func (t *Tracker) OnServiceAdd(service *v1.Service) { t.OnServiceUpdate(nil, service) }

// OnServiceUpdate records a changed service.
func (t *Tracker) OnServiceUpdate(oldService, service *v1.Service) {
	if t.services.Update(oldService, service) {
		t.changed(ServiceChange)
	}
}

// OnServiceDelete records a deleted service.
func (t *Tracker) OnServiceDelete(service *v1.Service) { t.OnServiceUpdate(service, nil) }

// OnServiceSynced records that the initial service list was delivered.
func (t *Tracker) OnServiceSynced() {
	t.mu.Lock()
	t.servicesSynced = true
	t.mu.Unlock()
	t.changed(SyncedChange)
}

// OnEndpointSliceAdd records a new slice.
func (t *Tracker) OnEndpointSliceAdd(slice *discovery.EndpointSlice) {
	t.OnEndpointSliceUpdate(nil, slice)
}

// OnEndpointSliceUpdate records a changed slice. A slice labelled as
// belonging to a headless service, or to another service proxy, is treated
// as deleted (the informer glue normally filters them out already).
//
// If the slice's kubernetes.io/service-name label changed (which the
// EndpointSlice controller never does, but hand-made objects may), the old
// slice is removed from its old service first.
func (t *Tracker) OnEndpointSliceUpdate(oldSlice, slice *discovery.EndpointSlice) {
	if slice == nil {
		return
	}
	changed := false
	if oldSlice != nil && oldSlice.Labels[discovery.LabelServiceName] != slice.Labels[discovery.LabelServiceName] {
		changed = t.slices.EndpointSliceUpdate(oldSlice, true)
	}
	if t.slices.EndpointSliceUpdate(slice, t.skipSlice(slice)) || changed {
		t.changed(EndpointsChange)
	}
}

// OnEndpointSliceDelete records a deleted slice.
func (t *Tracker) OnEndpointSliceDelete(slice *discovery.EndpointSlice) {
	if slice == nil {
		return
	}
	if t.slices.EndpointSliceUpdate(slice, true) {
		t.changed(EndpointsChange)
	}
}

func (t *Tracker) skipSlice(slice *discovery.EndpointSlice) bool {
	if _, headless := slice.Labels[proxy.LabelHeadless]; headless {
		return true
	}
	if name, ok := slice.Labels[proxy.LabelServiceProxyName]; ok {
		return t.cfg.ServiceProxyName == "" || name != t.cfg.ServiceProxyName
	}
	return false
}

// OnEndpointSlicesSynced records that the initial slice list was delivered.
func (t *Tracker) OnEndpointSlicesSynced() {
	t.mu.Lock()
	t.slicesSynced = true
	t.mu.Unlock()
	t.changed(SyncedChange)
}

// OnNodeAdd records this node's labels (events for other nodes are ignored).
func (t *Tracker) OnNodeAdd(node *v1.Node) { t.setNode(node, false) }

// OnNodeUpdate records this node's labels.
func (t *Tracker) OnNodeUpdate(_, node *v1.Node) { t.setNode(node, false) }

// OnNodeDelete forgets this node's labels.
func (t *Tracker) OnNodeDelete(node *v1.Node) { t.setNode(node, true) }

// OnNodeSynced is a no-op: node labels are optional (without them there is
// no topology-aware routing), so syncs never wait for them.
func (t *Tracker) OnNodeSynced() {}

func (t *Tracker) setNode(node *v1.Node, deleted bool) {
	if node == nil || node.Name != t.cfg.NodeName {
		return
	}
	var labels map[string]string
	if !deleted {
		labels = maps.Clone(node.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
	}
	t.mu.Lock()
	changed := !topologyLabelsEqual(t.nodeLabels, labels)
	t.nodeLabels = labels
	if changed {
		t.nodeChanged = true
	}
	t.mu.Unlock()
	if changed {
		t.changed(NodeChange)
	}
}

// isTopologyLabel: the labels endpoint selection may depend on.
func isTopologyLabel(k string) bool {
	return strings.HasPrefix(k, "topology.kubernetes.io/") || k == v1.LabelHostname
}

func topologyLabelsEqual(a, b map[string]string) bool {
	for k, v := range a {
		if isTopologyLabel(k) {
			if w, ok := b[k]; !ok || w != v {
				return false
			}
		}
	}
	for k := range b {
		if isTopologyLabel(k) {
			if _, ok := a[k]; !ok {
				return false
			}
		}
	}
	return true
}

// Synced reports whether both the services and the endpoint slices have
// been reported synced. Engines must not touch the node before.
func (t *Tracker) Synced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.servicesSynced && t.slicesSynced
}

// Pending returns the number of services and endpoint slices with a change
// recorded but not yet applied by Update (for metrics).
func (t *Tracker) Pending() (services, endpointSlices int) {
	return t.services.Pending(), t.slices.Pending()
}

// Skipped returns how many invalid fields, ports and endpoint addresses
// were logged and skipped since the Tracker was created (for a metric or a
// health signal: a growing count means bad objects in the cluster).
func (t *Tracker) Skipped() uint64 {
	return t.services.Skipped() + t.slices.Skipped()
}

// OtherFamily returns how many services are skipped now because all
// their cluster IPs are of the other IP family (see
// ServiceChangeTracker.OtherFamily; each is logged once, at V(2)).
func (t *Tracker) OtherFamily() int { return t.services.OtherFamily() }

// NodeLabels returns a copy of this node's labels (nil if unknown).
func (t *Tracker) NodeLabels() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.nodeLabels)
}

// Update applies every recorded change and returns the current maps and
// what changed. The maps are owned by the Tracker and stay valid (and
// unchanged) until the next Update; the engine must not modify them. Call
// it from the sync goroutine only. Its cost is proportional to the changes
// applied, never to the number of services.
func (t *Tracker) Update() Update {
	t.presize()
	svcRes, svcChanges := t.serviceMap.apply(t.services)
	epRes, epChanges := t.endpointsMap.apply(t.slices)

	u := Update{
		Services:        t.serviceMap,
		Endpoints:       t.endpointsMap,
		ServiceResult:   svcRes,
		EndpointsResult: epRes,
	}
	u.ChangedServices = union(svcRes.UpdatedServices, epRes.UpdatedServices, !t.filterActive)
	t.indexPorts(svcChanges)
	u.ServicePorts = t.portsByName
	if t.filterActive {
		t.updateScope(svcChanges, epChanges, u.ChangedServices)
		u.Services = t.scoped
	}

	t.mu.Lock()
	u.NodeLabels = t.nodeLabels
	u.NodeChanged = t.nodeChanged
	t.nodeChanged = false
	t.mu.Unlock()
	return u
}

// union is a ∪ b. With share, it may be a or b itself when that one holds
// the other (a cold start changes every service's ports and endpoints:
// two sets of every service, and a third would be their copy); without,
// it is always a new set (updateScope adds to it).
func union(a, b sets.Set[types.NamespacedName], share bool) sets.Set[types.NamespacedName] {
	if share {
		if len(a) >= len(b) && a.IsSuperset(b) {
			return a
		}
		if len(b) > len(a) && b.IsSuperset(a) {
			return b
		}
	}
	return a.Union(b)
}

// presize replaces the tracker's maps, while they are still empty (the
// first Update of a cold start), with maps sized for the pending changes,
// so that filling them does not grow them step by step.
func (t *Tracker) presize() {
	const worth = 64
	if len(t.serviceMap) == 0 && len(t.portsByName) == 0 {
		if n := t.services.Pending(); n > worth {
			t.serviceMap = make(ServicePortMap, n)
			t.portsByName = make(map[types.NamespacedName][]proxy.ServicePortName, n)
			if t.filterActive && len(t.scoped) == 0 {
				t.scoped = make(ServicePortMap, n)
			}
		}
	}
	if len(t.endpointsMap) == 0 {
		if n := t.slices.Pending(); n > worth { // slices: at least one per service
			t.endpointsMap = make(EndpointsMap, n)
		}
	}
}

// indexPorts records the current port names of the services that changed.
func (t *Tracker) indexPorts(svcChanges map[types.NamespacedName]*serviceChange) {
	for nn, c := range svcChanges {
		if len(c.current) == 0 {
			delete(t.portsByName, nn)
			continue
		}
		names := make([]proxy.ServicePortName, len(c.current))
		for i := range c.current {
			names[i] = c.current[i].name
		}
		t.portsByName[nn] = names
	}
}

// updateScope maintains the filtered view for the services that changed.
func (t *Tracker) updateScope(svcChanges map[types.NamespacedName]*serviceChange, epChanges map[types.NamespacedName]*endpointsChange, changed sets.Set[types.NamespacedName]) {
	for _, c := range svcChanges {
		// Drop the old ports from the view (indexPorts has the new ones).
		for _, p := range c.previous {
			delete(t.scoped, p.name)
		}
	}
	for nn, c := range epChanges {
		was := t.inScope.Has(nn)
		now := len(c.current) > 0
		switch {
		case now && !was:
			t.inScope.Insert(nn)
		case was && !now:
			t.inScope.Delete(nn)
		default:
			continue
		}
		changed.Insert(nn)
		for _, name := range t.portsByName[nn] {
			delete(t.scoped, name)
		}
	}
	// (Re)add the ports of every touched service that is in scope.
	add := func(nn types.NamespacedName) {
		if !t.inScope.Has(nn) {
			return
		}
		for _, name := range t.portsByName[nn] {
			if sp, ok := t.serviceMap[name]; ok {
				t.scoped[name] = sp
			}
		}
	}
	for nn := range svcChanges {
		add(nn)
	}
	for nn := range epChanges {
		add(nn)
	}
}
