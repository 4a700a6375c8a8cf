// Package userspace is the userspace service-proxy engine: kube-proxy's old
// "userspace" mode made into a library. Its Proxier (a proxy.Provider)
// opens a socket of its own for every TCP and UDP service port and copies
// each connection, or each client's UDP flow, to an endpoint chosen by a
// LoadBalancer.
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
//     one iptables-restore), with a full rewrite at least hourly and after
//     any failure. Proxier.Cleanup and CleanupLeftovers remove them.
//   - CaptureNone: no rules. Each service port is served on ListenAddress
//     at a proxy port (Proxier.ProxyAddr, Proxier.Listeners) and at its node
//     port.
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
//     doubling backoff. Data is copied with io.Copy between *net.TCPConn, so
//     Linux splices it; a clean EOF is passed on as a half-close, an error in
//     either direction resets both sides. With no endpoint (and no capture
//     rule refusing it first) the client connection is reset.
//   - UDP: one flow per client address, ended after Config.UDPIdleTimeout
//     without traffic either way, at most Config.MaxUDPFlows per socket
//     (further clients' datagrams are dropped and counted). With no
//     endpoint datagrams are dropped.
//   - SCTP service ports are not served: logged once and counted
//     (CounterSkippedProtocol). A service port that cannot get a socket
//     (ErrPortsExhausted, a bind error) is reported by Sync as a
//     *ServiceError and retried at each sync; every other service is served.
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
// Testing: userspacetest.Tracer answers the conformance table's questions
// from the rules the proxier wrote and its sockets. The package's own tests
// run the table three ways: over iptablestest.Fake, over real loopback
// traffic without root (rules traced, data path real, pod addresses mapped
// to loopback stand-ins by a Sockets layer), and, as root, with real
// packets in network namespaces on both iptables backends.
package userspace
