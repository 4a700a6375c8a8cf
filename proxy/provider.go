package proxy

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// ServiceHandler receives Service events. Implementations only record the
// change; nothing touches the node until Sync.
type ServiceHandler interface {
	OnServiceAdd(service *v1.Service)
	OnServiceUpdate(oldService, service *v1.Service)
	OnServiceDelete(service *v1.Service)
	// OnServiceSynced is called once the initial list has been delivered.
	OnServiceSynced()
}

// EndpointSliceHandler receives EndpointSlice events. Legacy v1.Endpoints
// are converted to slices by the sources (see changetracker.EndpointsToSlices).
type EndpointSliceHandler interface {
	OnEndpointSliceAdd(slice *discovery.EndpointSlice)
	OnEndpointSliceUpdate(oldSlice, slice *discovery.EndpointSlice)
	OnEndpointSliceDelete(slice *discovery.EndpointSlice)
	// OnEndpointSlicesSynced is called once the initial list has been delivered.
	OnEndpointSlicesSynced()
}

// NodeHandler receives events for the proxier's own Node (its labels carry
// the topology zone used by topology-aware routing).
type NodeHandler interface {
	OnNodeAdd(node *v1.Node)
	OnNodeUpdate(oldNode, node *v1.Node)
	OnNodeDelete(node *v1.Node)
	OnNodeSynced()
}

// Provider is the contract every engine satisfies.
//
// Handlers may be called from any goroutine and only record. Sync programs
// the node synchronously: when it returns nil, the node reflects every object
// handed to the handlers before the call. Run syncs whenever something
// changed (no more often than the engine's minimum sync period), at least
// once every sync period, retries failed syncs, and returns when ctx ends.
//
// Until both OnServiceSynced and OnEndpointSlicesSynced have been called,
// Sync returns ErrNotSynced and touches nothing.
type Provider interface {
	ServiceHandler
	EndpointSliceHandler
	NodeHandler
	Sync(ctx context.Context) error
	Run(ctx context.Context) error
}

// ErrNotSynced is returned by Sync before the initial lists of Services and
// EndpointSlices have both been reported synced.
var ErrNotSynced = errors.New("proxy: services and endpoint slices not yet synced")
