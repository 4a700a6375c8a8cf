// Package filesource feeds a proxy.Provider from a file of ordinary
// Kubernetes manifests, for nodes without an API server, tests and dry
// runs.
//
// The file holds YAML documents separated by "---" lines, or a stream of
// JSON values, each a Service (v1), EndpointSlice (discovery.k8s.io/v1),
// Endpoints (v1) or Node (v1), or a List of them (kind List, a typed list
// such as ServiceList, or a JSON array). ParseObjects reads such a file on
// its own, for tools such as a --dry-run.
//
// Guarantees of a Source:
//   - Load hands the provider the difference between this read and the
//     previous one, keyed by kind/namespace/name: new objects as adds,
//     changed ones as updates, vanished ones as deletes (adds and updates
//     in the order Node, Services, EndpointSlices, Endpoints; deletes in
//     the reverse order; by namespace and name within a kind). Unchanged
//     objects produce no events; an unchanged file (same SHA-256) is not
//     even parsed again.
//   - After the first successful read, OnServiceSynced,
//     OnEndpointSlicesSynced and OnNodeSynced are called, once.
//   - A bad document (or List item) is a *ParseError giving its document
//     index, line and cause (errors.Is-able sentinels such as ErrSyntax or
//     ErrUnsupportedKind); it is skipped and everything else still applies.
//     When a document that was good becomes bad, its object keeps its last
//     good version as long as the kind and name can still be read (a typo
//     in a field must not delete a service); a document too broken to name
//     its object counts as deleted.
//   - A file that cannot be read changes nothing: the provider keeps the
//     last good state.
//   - Legacy Endpoints reach the provider as EndpointSlices
//     (changetracker.EndpointsToSlices); only the Node named
//     Options.NodeName is handed on; the service-proxy-name and headless
//     labels select objects exactly as proxy/informers does.
//   - Run polls the file every Options.Interval on an injectable clock.
package filesource
