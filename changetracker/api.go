package changetracker

// The types the engines compile against: the service and endpoint maps,
// the engines' hooks that build their entries, the trackers' configs and
// results, and Update, what Tracker.Update hands an engine's sync.

import (
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
)

// ServicePortMap is the current set of service ports of one IP family.
type ServicePortMap map[proxy.ServicePortName]proxy.ServicePort

// EndpointsMap is the current set of endpoints of each service port.
type EndpointsMap map[proxy.ServicePortName][]proxy.Endpoint

// MakeServicePortFunc lets an engine wrap the base service port with its own data.
type MakeServicePortFunc func(port *v1.ServicePort, service *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort

// MakeEndpointFunc lets an engine wrap the base endpoint with its own data.
// The hook may keep both pointers but must not modify what they point to:
// base is shared with the tracker's cache of the slice (a service with one
// slice hands out the cached values themselves, without a copy), and the
// name lives in the tracker's per-service result.
type MakeEndpointFunc func(base *proxy.BaseEndpoint, svcPortName *proxy.ServicePortName) proxy.Endpoint

// ServiceTrackerConfig configures a ServiceChangeTracker. Zero values: see fields.
type ServiceTrackerConfig struct {
	// IPFamily is the family this tracker keeps (required).
	IPFamily v1.IPFamily
	// ServiceProxyName: see proxy.ShouldSkipService. Empty: services labelled
	// service.kubernetes.io/service-proxy-name are skipped. Set: only services
	// labelled with exactly this name are kept.
	ServiceProxyName string
	// MakeServicePort wraps each port; nil keeps *proxy.BaseServicePort.
	MakeServicePort MakeServicePortFunc
	// Logger; the zero value discards.
	Logger logr.Logger
}

// UpdateServiceMapResult says what an update of the ServicePortMap changed.
type UpdateServiceMapResult struct {
	// UpdatedServices are services whose ports changed in any way.
	UpdatedServices sets.Set[types.NamespacedName]
	// DeletedUDPClusterIPs are UDP cluster IPs no longer served; their
	// conntrack entries should be removed.
	DeletedUDPClusterIPs sets.Set[netip.Addr]
	// DeletedUDPServicePorts are the UDP service ports removed by the
	// update (their service deleted, or the port dropped from it), as they
	// were, sorted by name: the entries to every frontend of theirs
	// (cluster, external and load-balancer IPs, at the port) should be
	// removed, as kube-proxy v1.38 does (kubernetes#141371). Nil when none.
	DeletedUDPServicePorts []proxy.ServicePort
}

// EndpointsTrackerConfig configures an EndpointsChangeTracker.
type EndpointsTrackerConfig struct {
	// IPFamily is the family this tracker keeps (required); other addresses are ignored.
	IPFamily v1.IPFamily
	// NodeName decides Endpoint.IsLocal.
	NodeName string
	// Filter keeps only endpoints of this proxier's pod networks.
	Filter proxy.EndpointFilter
	// MakeEndpoint wraps each endpoint; nil keeps *proxy.BaseEndpoint.
	MakeEndpoint MakeEndpointFunc
	Logger       logr.Logger
}

// UpdateEndpointsMapResult says what an update of the EndpointsMap changed.
type UpdateEndpointsMapResult struct {
	// UpdatedServices are services whose endpoints changed.
	UpdatedServices sets.Set[types.NamespacedName]
	// DeletedUDPEndpoints are UDP endpoints that were removed or stopped
	// being ready, whose conntrack entries should be removed. Precisely (as
	// kube-proxy): endpoints that were serving and are gone or no longer
	// serving; for an endpoint that is not terminating, serving is the
	// ready condition. A ready endpoint that starts terminating but still
	// serves keeps its entries, so its flows can drain.
	DeletedUDPEndpoints []proxy.ServiceEndpoint
	// NewlyActiveUDPServices are UDP service ports that went from no ready
	// (precisely: serving) endpoints to some (stale conntrack entries to
	// the VIP must go).
	NewlyActiveUDPServices []proxy.ServicePortName
	// LocalReadyEndpoints is, for each updated service, the number of ready
	// local endpoints (for health-check node ports).
	LocalReadyEndpoints map[types.NamespacedName]int
	// LastChangeTriggerTimes are, per service, the
	// endpoints.kubernetes.io/last-change-trigger-time annotations of the
	// slice changes applied (those from before the tracker was created are
	// left out); the engine base observes kube-proxy's network programming
	// latency from them once a sync succeeds. Nil when there are none.
	LastChangeTriggerTimes map[types.NamespacedName][]time.Time
}

// Config configures a Tracker, the two change trackers plus the node,
// behind the proxy handler interfaces. The engine base (proxy/engine)
// holds one per engine; an engine never embeds it, so no tracker method
// becomes an engine method. Every field has a usable zero value.
type Config struct {
	// IPFamily is the family the tracker keeps: service ports of its
	// cluster IPs and endpoints of its address type; others are ignored.
	// "" means IPv4.
	IPFamily v1.IPFamily
	// NodeName is this node's name: it decides Endpoint.IsLocal and which
	// Node's labels (topology zone, hostname) are kept. "" makes no
	// endpoint local and ignores every Node.
	NodeName string
	// ServiceProxyName: see proxy.ShouldSkipService. "": services (and
	// slices) labelled service.kubernetes.io/service-proxy-name are
	// skipped; set: only those labelled with exactly this name are kept.
	ServiceProxyName string
	// Filter keeps only endpoints in this proxier's pod networks (zero:
	// every endpoint). With an active Filter, Update.Services leaves out
	// the services that have no endpoint of ours.
	Filter proxy.EndpointFilter
	// MakeServicePort and MakeEndpoint let an engine wrap the base values
	// with its own data (nil keeps *proxy.BaseServicePort and
	// *proxy.BaseEndpoint); they must not modify the base or name given.
	MakeServicePort MakeServicePortFunc
	MakeEndpoint    MakeEndpointFunc
	// Logger receives skipped fields, ports and addresses (V(2) and up);
	// the zero value discards.
	Logger logr.Logger
	// OnChange, if set, is called after a handler recorded a change that
	// needs a sync (the engine base triggers its loop and counts the change
	// for metrics from it), with the kind of change. Called without the
	// tracker's lock held, from the handler's goroutine.
	OnChange func(kind Change)
}

// Change is the kind of event a handler recorded (see Config.OnChange).
type Change int

// The kinds of change reported to Config.OnChange.
const (
	// ServiceChange: a Service add, update or delete changed a service port.
	ServiceChange Change = iota + 1
	// EndpointsChange: an EndpointSlice add, update or delete changed an endpoint.
	EndpointsChange
	// NodeChange: this node's topology labels changed.
	NodeChange
	// SyncedChange: OnServiceSynced or OnEndpointSlicesSynced was called.
	SyncedChange
)

// Update is what Tracker.Update hands the engine for one sync.
type Update struct {
	// Services and Endpoints are the tracker's current maps (owned by the
	// tracker, read-only for the engine until the next Update; the
	// endpoints they hold are never modified, not even after it). With an
	// active Filter, Services leaves out services with no endpoints of ours.
	Services  ServicePortMap
	Endpoints EndpointsMap
	// ServiceResult and EndpointsResult are what this update changed.
	ServiceResult   UpdateServiceMapResult
	EndpointsResult UpdateEndpointsMapResult
	// ServicePorts lists, for every service the tracker holds ports of (in
	// the Filter's scope or not), its current port names: with
	// ChangedServices it finds the changed ports without a walk over
	// Services. Owned by the tracker, read-only, valid until the next Update.
	// A changed service with no entry (or an empty one) has no ports left
	// in this family: it was deleted, lost its cluster IP of this family,
	// became headless or moved to another service proxy; the engine
	// removes whatever it wrote for it. Its ports that are out of the
	// Filter's scope are in ServicePorts but not in Services.
	ServicePorts map[types.NamespacedName][]proxy.ServicePortName
	// ChangedServices is the union of both results' UpdatedServices (and of
	// services that entered or left scope through the Filter).
	ChangedServices sets.Set[types.NamespacedName]
	// NodeLabels are the current labels of this node (nil if unknown).
	NodeLabels map[string]string
	// NodeChanged reports the node's topology labels changed since the last
	// Update: endpoint selection may change for every service, so engines
	// should do a full sync.
	NodeChanged bool
}

// Ensure the handler contract is met.
var (
	_ proxy.ServiceHandler       = (*Tracker)(nil)
	_ proxy.EndpointSliceHandler = (*Tracker)(nil)
	_ proxy.NodeHandler          = (*Tracker)(nil)
)
