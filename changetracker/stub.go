package changetracker

// TEMPORARY stubs so that dependent packages compile while the core helper
// writes the real implementation. The core helper deletes this file.

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

type ServiceChangeTracker struct{}
type EndpointsChangeTracker struct{}
type Tracker struct{}

func NewServiceChangeTracker(cfg ServiceTrackerConfig) *ServiceChangeTracker { panic("unimplemented") }
func (t *ServiceChangeTracker) Update(previous, current *v1.Service) bool    { panic("unimplemented") }
func (m ServicePortMap) Update(t *ServiceChangeTracker) UpdateServiceMapResult {
	panic("unimplemented")
}
func (m ServicePortMap) HealthCheckNodePorts() map[types.NamespacedName]uint16 {
	panic("unimplemented")
}
func NewEndpointsChangeTracker(cfg EndpointsTrackerConfig) *EndpointsChangeTracker {
	panic("unimplemented")
}
func (t *EndpointsChangeTracker) EndpointSliceUpdate(slice *discovery.EndpointSlice, removeSlice bool) bool {
	panic("unimplemented")
}
func (m EndpointsMap) Update(t *EndpointsChangeTracker) UpdateEndpointsMapResult {
	panic("unimplemented")
}
func (m EndpointsMap) LocalReadyEndpoints() map[types.NamespacedName]int   { panic("unimplemented") }
func EndpointsToSlices(ep *v1.Endpoints) []*discovery.EndpointSlice        { panic("unimplemented") }
func New(cfg Config) *Tracker                                              { panic("unimplemented") }
func (t *Tracker) Synced() bool                                            { panic("unimplemented") }
func (t *Tracker) Update() Update                                          { panic("unimplemented") }
func (t *Tracker) OnServiceAdd(service *v1.Service)                        { panic("unimplemented") }
func (t *Tracker) OnServiceUpdate(oldService, service *v1.Service)         { panic("unimplemented") }
func (t *Tracker) OnServiceDelete(service *v1.Service)                     { panic("unimplemented") }
func (t *Tracker) OnServiceSynced()                                        { panic("unimplemented") }
func (t *Tracker) OnEndpointSliceAdd(slice *discovery.EndpointSlice)       { panic("unimplemented") }
func (t *Tracker) OnEndpointSliceUpdate(o, slice *discovery.EndpointSlice) { panic("unimplemented") }
func (t *Tracker) OnEndpointSliceDelete(slice *discovery.EndpointSlice)    { panic("unimplemented") }
func (t *Tracker) OnEndpointSlicesSynced()                                 { panic("unimplemented") }
func (t *Tracker) OnNodeAdd(node *v1.Node)                                 { panic("unimplemented") }
func (t *Tracker) OnNodeUpdate(oldNode, node *v1.Node)                     { panic("unimplemented") }
func (t *Tracker) OnNodeDelete(node *v1.Node)                              { panic("unimplemented") }
func (t *Tracker) OnNodeSynced()                                           { panic("unimplemented") }
