// Package informers connects client-go informers to a proxy.Provider the
// way kube-proxy does.
//
// NewInformerFactory gives a factory whose Service and EndpointSlice (or
// Endpoints) watches carry kube-proxy's label selector (LabelSelector): no
// service.kubernetes.io/headless label, and no
// service.kubernetes.io/service-proxy-name label or, for a named proxy,
// that label equal to its name. NewNodeInformerFactory watches only this
// proxy's Node. Register wires Services (also filtered by
// spec.clusterIP!=None), EndpointSlices or legacy Endpoints (converted with
// changetracker.EndpointsToSlices; slices that disappear on update are
// deleted) and the Node to the provider's handlers, and calls each Synced
// handler once, after its informer has delivered the initial list.
//
// Guarantees: handlers are called from the informers' goroutines, in the
// order client-go delivers events; delete events whose final state is
// unknown (cache.DeletedFinalStateUnknown) are unwrapped; an event carrying
// an object of an unexpected type is logged and skipped, never passed on.
package informers
