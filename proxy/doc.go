// Package proxy is the vocabulary and the contracts shared by every svcproxy
// engine (iptables, nftables, ipvs, userspace, winkernel), and the
// Kubernetes endpoint selection rules they all apply. Every engine is built
// on package proxy/engine's base, which owns the change tracker, the sync
// loop and the drift check around the engine's own plan and apply.
//
// # Vocabulary
//
// ServicePortName names one port of one Service; ServicePort and Endpoint
// are what an engine knows of a service port and of one of its backends,
// already reduced to one IP family (BaseServicePort and BaseEndpoint are the
// plain implementations built by package changetracker; engines may wrap
// them). Addresses are netip values throughout.
//
// # Contracts
//
// Provider is what every engine satisfies: the handler interfaces
// (ServiceHandler, EndpointSliceHandler, NodeHandler) only record, Sync
// programs the node synchronously, Run syncs on change and periodically until
// its context ends. Sync returns ErrNotSynced until both initial lists have
// been delivered. NewDualStack combines one Provider per IP family into one.
//
// # Endpoint selection
//
// CategorizeEndpoints decides, for one service port, which endpoints serve
// cluster-wide traffic, which serve node-local traffic
// (externalTrafficPolicy / internalTrafficPolicy Local), and whether the
// service has endpoints at all, with kube-proxy's rules: ready endpoints
// first, serving-and-terminating ones when no endpoint is ready, and
// topology hints (zone, or node with PreferSameNode) only when the service
// opted in and only when every ready endpoint carries them
// (all-or-nothing). ShouldSkipService says which services no proxier
// programs (headless, ExternalName, another proxy's).
//
// # Guarantees
//
//   - Everything in this package is pure: no I/O, no globals, no logging;
//     inputs are never modified, and results never alias them (except
//     CategorizeEndpointsShared's, which says when).
//   - CategorizeEndpoints is O(number of endpoints of the port) and its
//     results keep the input order, so engines render stable rules.
//   - The dual-stack Provider holds no state; it is as safe for concurrent
//     use as the two Providers it wraps. Its Sync runs both and joins their
//     errors (errors.Is sees each).
package proxy
