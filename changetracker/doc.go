// Package changetracker turns the stream of Service, EndpointSlice and Node
// events into the maps every svcproxy engine plans from, with kube-proxy's
// semantics (k8s.io/kubernetes pkg/proxy, release 1.34), for one IP family.
//
// # Pieces
//
//   - ServiceChangeTracker records Service changes; ServicePortMap.Update
//     applies them to a ServicePortMap (one proxy.ServicePort per
//     ServicePortName) and reports UpdatedServices, the UDP cluster IPs
//     no longer served and the UDP service ports removed (whose conntrack
//     entries should go; the ports as kube-proxy v1.38 reports them).
//   - EndpointsChangeTracker keeps a cache of every EndpointSlice (per
//     service, per slice name, reduced to the fields a proxy uses);
//     EndpointsMap.Update applies the pending slice changes to an
//     EndpointsMap and reports UpdatedServices, the stale UDP endpoints, the
//     UDP service ports that just got their first serving endpoint, and the
//     number of ready local endpoints of every updated service.
//   - Tracker bundles both, plus this node's labels, behind the
//     proxy.ServiceHandler, EndpointSliceHandler and NodeHandler interfaces.
//     Engines embed a *Tracker and call Tracker.Update at each sync.
//   - EndpointsToSlices converts legacy v1.Endpoints for clusters (or object
//     files) without EndpointSlices.
//
// # Semantics
//
//   - A service is kept only if proxy.ShouldSkipService lets it through and it
//     has a cluster IP of the tracker's family; external IPs, load-balancer
//     ingress IPs (except those with ipMode Proxy) and source ranges are
//     filtered to the family; ClientIP affinity defaults to 10800 s;
//     externalTrafficPolicy Local only counts on an externally reachable
//     service; the health-check node port only on a Local LoadBalancer.
//     A service whose cluster IPs are all of the other family is logged
//     once (V(2)) and counted while it stays so (Tracker.OtherFamily); in
//     a dual-stack proxy the other family's tracker serves it.
//   - Bad input (an out-of-range port, an unparsable address, an unknown
//     protocol) is logged through the configured logr.Logger, counted
//     (Tracker.Skipped) and skipped, just that field, port or endpoint; the
//     rest of the object is used. Addresses of the other family are dropped
//     silently (they belong to the other family's tracker). Nothing panics.
//   - A change that returns an object to its last applied state is no change
//     (Update / EndpointSliceUpdate cancel the pending entry); a slice update
//     that touches only fields the proxy ignores is no change.
//   - Endpoints: only the first address of each endpoint is used (as every
//     proxy does); addresses of the other family and those the
//     proxy.EndpointFilter rejects are dropped; an ip:port present twice (in
//     one slice or several) appears once: a copy that is not terminating
//     wins, as in kube-proxy v1.37 (a pod IP reused while the old pod
//     terminates is the new pod's), then a ready one, then a serving one,
//     then a local one, so the result never depends on arrival order; each
//     port's list is sorted by address, then port. Slices without the
//     kubernetes.io/service-name label and FQDN slices are ignored.
//   - Stale UDP conntrack: an endpoint that was serving and is gone or no
//     longer serving is reported (a ready endpoint that starts terminating
//     but still serves keeps its flows, as in kube-proxy).
//   - With an active Filter, Tracker.Update's Services holds only services
//     with at least one endpoint passing the filter (the others belong to
//     another proxy and get no rules); services entering or leaving that
//     scope are in ChangedServices.
//
// # Cost
//
// Applying changes costs O(size of the change): the trackers keep the set of
// services with pending changes, and an apply touches only those services
// (rebuilding each changed service's endpoints from its own slices), never
// the whole map. The filtered view of the Tracker is maintained the same
// way. Only ServicePortMap.HealthCheckNodePorts and
// EndpointsMap.LocalReadyEndpoints walk whole maps, and are documented so.
//
// BenchmarkTrackerChurn shows it (N services × 10 endpoints applied, then
// each iteration changes one endpoint IP in 100 slices and calls Update):
//
//	go test -run XXX -bench BenchmarkTrackerChurn -benchtime 200x -count 1 ./changetracker/
//
// Allocations per change are the same at 1,000 and 10,000 services, and
// the CPU profile holds no function whose cost depends on N. The figures
// are in BENCHMARKS.md ("change tracker").
//
// # Concurrency
//
// ServiceChangeTracker and EndpointsChangeTracker methods are safe for
// concurrent use (each holds its own mutex; applying swaps the pending set
// out under the lock and does the work outside it). The Tracker's handlers
// are safe for concurrent use and call Config.OnChange after releasing every
// lock. Tracker.Update, ServicePortMap.Update and EndpointsMap.Update must be
// called from one goroutine at a time (the engine's sync); the maps they
// return are owned by the tracker and must be treated as read-only by the
// engine until the next Update. Objects handed to the handlers must not be
// modified afterwards (as with any informer object).
package changetracker
