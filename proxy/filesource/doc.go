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
//   - Objects get the API server's defaults before validation (a port's
//     protocol TCP, targetPort, sessionAffinity None and the ClientIP
//     timeout, traffic policies Cluster, clusterIPs, ipFamilies and
//     ipFamilyPolicy from the cluster IPs, …), so a file behaves as the
//     same objects created through the API.
//   - A file that does not parse as a whole changes nothing: the provider
//     keeps the last good state and Load returns ErrNotWhole (or
//     ErrTooLarge). That is an empty file, a binary one, one over
//     Options.MaxBytes, or one with a document that is not valid YAML/JSON
//     or does not name its object — what a non-atomic editor save or a
//     copy cut short leaves. Update the file by writing a complete new one
//     next to it and renaming it over the old (mv, rename(2)): readers see
//     the old or the new file, never a part. To remove every object, write
//     an empty List ("apiVersion: v1", "kind: List", "items: []").
//   - Otherwise a bad object (or List item) is a *ParseError giving its
//     document index, line, object and cause (errors.Is-able sentinels such
//     as ErrInvalidObject or ErrUnsupportedKind); it is skipped, counted
//     (Stats), logged by Run at default verbosity, and everything else
//     still applies. An object that was good keeps its last good version
//     (a typo in a field must not delete a service).
//   - A file that cannot be read changes nothing either.
//   - Legacy Endpoints reach the provider as EndpointSlices
//     (changetracker.EndpointsToSlices); only the Node named
//     Options.NodeName is handed on; the service-proxy-name and headless
//     labels select objects exactly as proxy/informers does.
//   - Run polls the file every Options.Interval on an injectable clock.
package filesource
