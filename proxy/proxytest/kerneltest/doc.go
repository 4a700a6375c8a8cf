// Package kerneltest runs svcproxy's cross-mode conformance table
// (package proxytest, through the runner of proxytest/conformance) with
// real packets on the real kernel, in network namespaces the test makes:
// the kit svcproxy's own engines are tested with, for a CNI author or an
// embedder who wants the same answer about one of svcproxy's engines
// configured as their agent configures it, or about an engine of their own.
//
// # What it does
//
// Run builds, for every scenario of the table, proxytest's Topology in
// fresh network namespaces (Env: the node, a "world" router behind the
// node's default route, two external clients and one namespace per pod,
// joined to the node by veth pairs, every pod and the world answering on
// Topology.ServerPorts with "<name> <client-ip> <local-ip:port>"); asks
// Harness.New for the engine, which programs the node namespace; feeds it
// the scenario's steps as informer events; calls Sync inside the node
// namespace; and answers every check with real connections (Prober, a
// proxytest.Tracer and proxytest.Sampler): who answered is the backend,
// the source they saw says whether the packet was masqueraded, a refusal
// or ICMP error is Rejected, silence is Dropped.
//
// # Guarantees
//
//   - It needs root on Linux; otherwise every entry point skips the test
//     with the reason (SkipUnlessRoot). Only namespaces the test made are
//     touched: never the host's namespace, links or rules. Everything is
//     removed in t.Cleanup, even when the test fails; namespaces left by a
//     killed test process are removed by the next NewEnv.
//   - Every scenario gets a fresh Env and a fresh engine, so scenarios
//     cannot leak state into each other. Loops are bounded (at most
//     DefaultMaxAttempts connections per check, conformance.SyncTimeout
//     per Sync).
//   - The engine's Sync (and Run) run on a thread inside the node
//     namespace (InNamespace): a Runner that execs iptables, nft or
//     ipvsadm from the calling goroutine, or opens netlink sockets there,
//     programs the node. Goroutines an engine starts on its own do not
//     inherit the namespace.
//   - Differences an engine is allowed are Harness.Quirks, each with a
//     Reason; a quirk that matches no check fails the run (see package
//     conformance).
//
// # Use
//
//	func TestMain(m *testing.M) { os.Exit(kerneltest.Main(m)) } // a private xtables lock
//
//	func TestConformanceKernel(t *testing.T) {
//		kerneltest.Run(t, v1.IPv4Protocol, kerneltest.Harness{
//			New: func(t *testing.T, env *kerneltest.Env, opts proxytest.Options) proxy.Provider {
//				// build the engine for env.Topo; anything touching the
//				// kernel here goes through kerneltest.Exec(env.Node, ...)
//			},
//		})
//	}
//
// See the package's Example (svcproxy's iptables engine, configured as an
// agent would) and examples/kerneltest, a module of its own that runs the
// table from outside svcproxy's module. The package is the public face of
// svcproxy's internal/netnstest: its types are aliases of that package's,
// so both always answer the same.
package kerneltest
