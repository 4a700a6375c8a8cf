// Package svcproxy is kube-proxy made into a library: Kubernetes
// service-proxy engines that a CNI agent, a test or a small binary can
// import, drive and inspect.
//
// A service proxy watches Services, EndpointSlices (or legacy Endpoints) and
// its own Node, and programs the node so that traffic to a ClusterIP,
// NodePort, LoadBalancer or external IP reaches a ready backend pod. This
// module holds the shared machinery and one engine per kube-proxy mode.
//
// # Data flow
//
//	sources (client-go informers, an objects file, your own code)
//	    │  OnServiceAdd / OnEndpointSliceUpdate / OnNodeUpdate …   (record only)
//	    ▼
//	changetracker: ServicePortMap + EndpointsMap, what changed since the last sync
//	    │  Sync(ctx)  (or Run(ctx): on change, rate-limited, and periodically)
//	    ▼
//	engine (on proxy/engine's base): plan (pure: desired dataplane) → diff (against what was applied) → apply
//	    ▼
//	node: iptables-restore, nftables, IPVS over netlink, ipsets, proxy sockets, HNS
//
// Every engine satisfies [github.com/svcproxy/svcproxy/proxy.Provider]:
// handlers only record, Sync is synchronous (when it returns nil the node
// reflects every object handed in before the call), and nothing touches the
// node before both services and endpoint slices have been reported synced.
//
// # Which package to import
//
//   - proxy: the vocabulary (ServicePortName, ServicePort, Endpoint), the
//     Provider contract, endpoint selection (traffic policies, topology,
//     terminating fallback) and the dual-stack fan-out.
//   - proxy/engine: the base every engine is built on (the change tracker,
//     the sync loop, full or partial syncs, the drift check, metrics), for
//     writing an engine of your own; changetracker: the Service and
//     EndpointSlice change trackers it holds.
//   - iptables: kube-proxy's iptables mode over iptables/xtables (the
//     iptables tools, or legacy tables written from the process);
//     iptables/iptablestest is its test kit; the stateful fake iptables and
//     the packet tracer for your tests are in iptables/xtables/xtablestest
//     (no engine imported).
//   - nftables: kube-proxy's nftables mode; nftables/nftablestest has a
//     fake and a tracer.
//   - ipvs: kube-proxy's IPVS mode, its kernel driver in ipvs/ipvskernel;
//     ipvs/ipvstest has fakes and a tracer.
//   - userspace: a real TCP/UDP proxy that can retry a failed backend.
//   - winkernel: the Windows HNS mode (see its package documentation for status).
//   - proxy/informers, proxy/filesource: feed a Provider from client-go
//     informers or from a file of manifests.
//   - proxy/healthcheck, proxy/metrics: kube-proxy's health endpoints and
//     Prometheus metrics.
//   - proxy/proxytest: the conformance table every engine passes, for
//     checking an engine of your own.
//   - examples/minimal-proxy: the reference binary, a drop-in for
//     kube-proxy's flags and configuration file.
package svcproxy
