// Package winkernel is kube-proxy's Windows mode ("kernelspace"): Services
// programmed as Host Networking Service (HNS) load balancers, on the shared
// engine base (package proxy/engine).
//
// The engine drives the HNS interface declared here, in this package's own
// value types. NewHNS returns the real one over Microsoft's hnslib (hcn,
// HNS API v2) on Windows and ErrNotSupported elsewhere; package
// winkernel/winkerneltest has a stateful fake and a packet tracer, so the
// engine builds, and its tests run, on every OS.
//
// # What it programs
//
// For every service port, as kube-proxy's winkernel (1.34, and 1.37 where
// it changed: see below): one load
// balancer for the cluster IP, one for the node port (no frontend VIP: it
// answers on every host address), one per external IP, one per
// load-balancer ingress IP, and with Config.ForwardHealthCheckVIP one per
// ingress IP forwarding the health-check node port (or HealthzPort) to the
// root endpoint (Config.RootHNSEndpointName). Cluster-IP LBs use DSR when
// Config.EnableDSR; node-port, external-IP and ingress LBs use DSR and only
// local endpoints for externalTrafficPolicy: Local; internalTrafficPolicy:
// Local restricts the cluster-IP LB to local endpoints; ClientIP session
// affinity is source-IP distribution; the "preserve-destination: true"
// annotation gives ingress LBs PreserveDIP and UseMux and restricts node
// ports and ingress to local endpoints. DSR settings need HNS's DSR
// feature and are dropped without it.
//
// On an overlay network the engine keeps the source-VIP endpoint
// (Config.SourceVIP) and a remote endpoint for every backend on another
// node, with the provider address of the network's remote subnet that
// holds it (the node IP when none does, and then the node IP as the LB's
// source VIP), plus kube-proxy's remote endpoint for each cluster IP. On
// l2bridge remote endpoints carry a MAC made up from their address. Remote
// endpoints are shared by every service port that uses them and deleted
// when the last one goes; local endpoints (the CNI's) are never deleted.
//
// # Differences from kube-proxy's winkernel
//
//   - Endpoint selection is the shared one (proxy.CategorizeEndpoints) for
//     every kind of LB: ready endpoints, else serving-and-terminating ones.
//     Upstream falls back to terminating endpoints only for services with
//     load-balancer ingress IPs.
//   - externalTrafficPolicy: Local selects local endpoints for node ports
//     and external IPs even when HNS lacks DSR (upstream then uses every
//     endpoint).
//   - Health-check VIP LBs are TCP whatever the service's protocol (the
//     check is HTTP), and carry the IPv6 flag on IPv6.
//   - Every full sync (the first, after a failure, hourly, and when the
//     drift check finds one of our LBs, of the remote endpoints they use
//     or the source-VIP endpoint gone) lists the network, its
//     endpoints and every LB, and reconciles: an LB deleted or changed
//     behind our back is recreated or updated. Partial syncs plan and write
//     only the changed services' ports.
//   - Start-up adopts existing LBs instead of deleting every LB on the host.
//     The ownership rule: an LB is ours when it holds the VIP, protocol and
//     port of an LB we plan, when this process created it, when its
//     source VIP is ours (Config.SourceVIP or the node IP) and at least
//     one endpoint it names is on our network, or, on an overlay network,
//     when its source VIP is Config.SourceVIP (the address of our
//     network's source-VIP endpoint, not a node IP) and no endpoint it
//     names exists on any network any more (an LB of an earlier run whose
//     backends are all gone; this lists every network's endpoints, once,
//     only when such an LB is found). An LB with the node IP as source VIP
//     whose endpoints are all gone is not recognised (every network's
//     proxy may SNAT to the node IP). Other LBs are never updated or
//     deleted. A remote endpoint is ours when we created it (named
//     RemoteEndpointNamePrefix+IP) or this process used it.
//   - A failed delete keeps the LB in the engine's view and fails the sync;
//     the next (full) sync lists HNS and retries, so no cached ID outlives
//     the object and no stale LB holds a port unseen.
//   - LBs are updated in place while HNS supports it (as kube-proxy v1.37's
//     ModifyLoadBalancerPolicy); after one "not implemented" answer the
//     engine deletes and recreates instead.
//   - Topology: node and zone hints (PreferSameNode, PreferSameZone and its
//     deprecated alias PreferClose) narrow the backends as on Linux, through
//     the shared selection; upstream's Windows proxy (v1.37) ignores them.
//   - Remote endpoints that share an address with a local endpoint (the
//     Windows Server 2019/2022 bug): the local one is used, as upstream;
//     but the stale remote endpoint is deleted only when it is ours and
//     unused, where kube-proxy v1.37 deletes every such remote endpoint on
//     each listing (kubernetes#135146, #138603, #139503). We differ on
//     purpose: a remote endpoint this engine did not create may be another
//     agent's on a shared HNS (the ownership rule above), and kube-proxy
//     can delete it only because it assumes it is the node's one proxy.
//   - A missing network fails the sync (retried by Run) instead of blocking
//     the constructor; nothing touches HNS before the first sync.
//
// An HNS load balancer has one internal port: when a named target port
// resolves to different ports on different pods, only the endpoints with
// the first port (lowest address) are used, and the rest are logged.
// loadBalancerSourceRanges are not enforced (HNS LBs have no source
// filter), and there is no reject: unserved traffic is not proxied.
//
// Dual stack is two engines, one per family, on one HNS: an LB's key
// (LBKey) holds its IPv6 flag, so the IPv4 and IPv6 node-port LBs of a port
// (both without a VIP) are two LBs that neither engine mistakes for its
// own, as kube-proxy v1.37 keys them. Failed LB creates, updates and
// deletes are counted in kube-proxy v1.37's
// kubeproxy_sync_proxy_rules_winkernel_lb_{create,update,delete}_failures_total
// (labels ip_family, lb_type, error; lb_type "unknown" for an adopted LB
// no plan claimed, which kube-proxy, deleting every LB at start-up, never has).
//
// # Not verified without a Windows host
//
// Everything here is tested against winkerneltest's fake on Linux; the
// real adapter (hns_windows.go) is compiled for Windows in CI and its field
// translation is unit-tested through the JSON shapes of hcn's types, but
// it has not been run against a real HNS. In particular unverified: that
// HNS accepts the LBs exactly as built (flags, IPv6, health-check LBs),
// the error codes the adapter maps (port already exists, not implemented,
// not found), the tracer's model of when HNS SNATs (pod to cluster IP
// without, node and external clients with, DSR never) and hairpin
// traffic, and the cost of the listings on a host with many thousands of
// LBs.
package winkernel
