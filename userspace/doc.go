// Package userspace is the userspace service-proxy engine: kube-proxy's old
// "userspace" mode made into a library. Its Proxier (a proxy.Provider)
// opens a socket of its own for every TCP and UDP service port and copies
// each connection, or each client's UDP flow, to an endpoint chosen by a
// LoadBalancer.
//
// # The engine base
//
// Proxier is built on proxy/engine like every engine: NewProxier(cfg,
// ifs) with a Config that embeds engine.Common and the Interfaces it
// drives (the iptables runner of package iptables/xtables for the capture
// rules, the Sockets layer). Its exported methods are exactly the base's:
// the handlers, Sync, Run, DryRun, Cleanup, Close, Stats,
// RequestFullSync, Config and IPFamily. The base owns the change tracker,
// the loop, the full/partial decision, kube-proxy's sync metrics, proxy
// and service health, stale-UDP conntrack cleanup and Common.OnSync; this
// package supplies the hooks: Apply (plan, diff and apply of one update),
// DryRun (the plan as text; nothing opened or written), Drifted (the
// capture rules' canaries), Cleanup (CleanupLeftovers) and Close (every
// socket, connection and goroutine). What is particular to this engine
// is read with package-level functions: Listeners, ProxyAddr, Counters
// (the data-path counters) and ConfigOf.
//
// The code is split by concern: the plan (plan.go and plan_*.go: pure
// functions from a service port and its endpoints to sockets, endpoint
// sets and capture-rule plans, one file per decision), apply.go (which
// service ports a sync replans, teardown, balancer updates), listeners.go
// (proxy sockets and port allocation), rules.go and capture.go (capture
// rules: rendering, incremental and full writes, the drift check),
// connections.go (established connections, grace-period closing, the
// goroutines Close waits for), and tcp.go and udp.go (the data path).
//
// # How traffic reaches the proxy
//
// Config.Capture selects it:
//
//   - CaptureIPTables (default): nat rules redirect every cluster IP,
//     external IP, load-balancer IP and node port to the service port's
//     proxy socket, in the chains of the old userspace mode:
//     KUBE-PORTALS-CONTAINER and KUBE-NODEPORT-CONTAINER (from PREROUTING:
//     pods and the outside; REDIRECT, or DNAT to a specific ListenAddress),
//     KUBE-PORTALS-HOST and KUBE-NODEPORT-HOST (from OUTPUT: the node itself;
//     DNAT to HostIP) and, in the filter table, KUBE-NODEPORT-NON-LOCAL
//     (accepts node-port proxy ports) and KUBE-USERSPACE-FILTER (rejects
//     new connections to a socket whose service has no endpoints, drops
//     them when it has endpoints but none under the socket's traffic
//     policy, and drops load-balancer traffic from outside
//     loadBalancerSourceRanges). The first write fills the chains; later
//     ones change only the rules of the services that changed (-D/-A in
//     one iptables-restore); our chains are rewritten in full on every full
//     sync of the base (hourly, after a failed write, after a node label
//     change) and at once when the drift check finds a canary rule missing:
//     every full write puts a no-op rule first into KUBE-PORTALS-CONTAINER
//     and KUBE-USERSPACE-FILTER, and Run checks both every
//     Common.DriftCheckInterval (2s; one iptables -C each), so a flush of
//     the nat or filter table or of our chains is repaired within seconds.
//     On iptables-legacy the Runner writes them from the process
//     (iptables/xtables: on by default for the verified iptables and
//     kernel versions, switched off by RunnerConfig.LegacyTool,
//     --iptables-legacy-restore-tool or
//     SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0); each full write is read back
//     (xtables.Runner.CheckNextRestore), and a difference switches it off and
//     fails the write, which the next full sync redoes through the tool.
//     Proxier.Cleanup and CleanupLeftovers remove the chains.
//   - CaptureNone: no rules. Each service port is served on ListenAddress
//     at a proxy port (ProxyAddr, Listeners) and at its node port.
//   - CaptureBind: no rules; sockets bind the service addresses themselves
//     (they must be local: a dummy interface, or 127.0.0.0/8 in tests) and
//     the node ports.
//
// # Guarantees
//
//   - Endpoints are chosen with proxy.CategorizeEndpoints (traffic
//     policies, topology, terminating fallback). A service port has a
//     socket for its cluster endpoint set and, when a traffic policy is
//     Local, one for its local set. Cluster-IP traffic goes to the set
//     internalTrafficPolicy names; node-port, external-IP and load-balancer
//     traffic to the set externalTrafficPolicy names, except that traffic
//     from pods (Config.ClusterCIDRs) and from the node is short-circuited
//     to the cluster set, as in kube-proxy. Selection is round robin over a
//     per-change shuffle, with sessionAffinity: ClientIP and its timeout.
//   - Changes apply to new connections as soon as Sync returns.
//     Established TCP connections to an endpoint that left are closed after
//     Config.EndpointCloseGracePeriod unless it came back; UDP flows to it
//     are ended at once, and (with Config.Conntrack) conntrack entries of a
//     UDP service whose capture rules changed are deleted, so a client that
//     keeps its source port follows every change.
//   - TCP: a backend that refuses or times out (Config.TCPDialTimeout) is
//     skipped and the next one tried, up to Config.MaxRetries more times with
//     doubling backoff. On Linux the data is spliced (splice_linux.go)
//     through a pipe taken only while a burst is in flight, so an idle
//     proxied connection holds two descriptors (its two sockets) and two
//     goroutines; elsewhere it is copied with io.Copy. A clean EOF is passed on as a half-close, an error in
//     either direction resets both sides, and so does silence: once one side
//     has finished, the other must send at least every
//     Config.TCPHalfCloseTimeout (10s), so a client that left a backend that
//     never answers leaves no sockets or goroutines behind
//     (CounterHalfCloseReset). With no endpoint (and no capture
//     rule refusing it first) the client connection is reset.
//   - UDP: one flow per client address, ended after Config.UDPIdleTimeout
//     without traffic either way, at most Config.MaxUDPFlows per socket
//     (further clients' datagrams are dropped and counted). With no
//     endpoint datagrams are dropped.
//   - SCTP service ports are not served: logged once and counted
//     (CounterSkippedProtocol). A service port that cannot get a socket
//     (ErrPortsExhausted, a bind error) is reported by Sync as a
//     *ServiceError (inside the base's *engine.SyncError) and retried at
//     each sync; every other service is served. Such a failure makes the
//     base's next sync full, but the engine then replans only the failing
//     ports and what changed, and rewrites the rules only if the drift
//     check finds them changed.
//   - Close closes every socket, connection and flow and waits for every
//     goroutine the proxier started.
//   - The proxy originates the backend connection, so backends see the
//     node's address: userspacetest.Tracer always reports Masquerade.
//
// Proxying costs a second TCP connection per client (the payload itself
// is spliced, not copied through user space); see BENCHMARKS.md
// ("## userspace") for throughput, CPU per byte, latency, connection rates
// and sync cost measured against direct connections.
//
// Testing: package userspacetest has the kit every engine has (Fakes,
// NewFakes, Interfaces, Dump, NewTracer, proxytest.Faults on each fake);
// its Tracer answers the conformance table's questions from the rules the
// proxier wrote and its sockets. The package's own tests run the table
// three ways: over xtablestest.Fake, over real loopback traffic without
// root (rules traced, data path real, pod addresses mapped to loopback
// stand-ins by userspacetest.Sockets.Redirect), and, as root, with real
// packets in network namespaces on both iptables backends.
package userspace
