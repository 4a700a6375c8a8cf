// Package netnstest runs svcproxy's conformance table (proxy/proxytest,
// through the runner of proxy/proxytest/conformance) with real packets on the real kernel, in network namespaces made for the
// test. It needs root on Linux; otherwise every entry point skips the test
// with the reason (SkipUnlessRoot).
//
// # Topology
//
// NewEnv builds proxytest's Topology in fresh named namespaces (see Env for
// the picture): the node, a "world" router behind the node's default route,
// two external clients and one namespace per pod, joined to the node by
// veth pairs with /32 (/128) routes. Every pod and the world run TCP and
// UDP servers on Topology.ServerPorts that answer "<name> <client-ip>
// <local-ip:port>". Sysctls (forwarding, route_localnet, rp_filter, ICMP
// rate limits) are set inside the node namespace only; the host namespace,
// its links and its rules are never touched. Everything is removed in
// t.Cleanup, even when the build or the test fails; namespaces left by a
// test process that was killed are removed by the next NewEnv (names carry
// NamePrefix and the process id).
//
// # Driving an engine
//
// Exec(ns, f) runs f on an OS thread inside ns. Sockets opened and commands
// started (os/exec forks from the calling thread) by f belong to ns. So an
// engine is driven by calling its Sync inside Exec(env.Node, ...) with a
// Runner that execs iptables-restore from the calling goroutine; RunKernel
// does exactly that (InNamespace). Goroutines an engine starts do not
// inherit the namespace: Run is only correct for engines that sync on the
// calling goroutine.
//
// # Prober
//
// Env.Prober is a proxytest.Tracer and proxytest.Sampler that sends real
// connections from the namespace matching each Packet's Origin and Src,
// up to DefaultMaxAttempts times with DefaultTimeout each, and derives the
// Result from who answered and which source address they saw: Forwarded
// (with the backends seen, Masquerade, Sticky), NotProxied (the dialled
// address answered itself), Rejected (refused or ICMP unreachable, also
// when the ICMP error raced the connect call), Dropped (timeout or local
// drop). Disagreeing attempts are an error, never averaged. A timed-out
// attempt in a trace that otherwise answers is tried once more with
// DefaultSlowTimeout, stretched by $SVCPROXY_E2E_SLOWDOWN (an integer
// factor) in emulated guests.
//
// # Entry point
//
// An engine's real-kernel conformance test is
//
//	netnstest.RunKernel(t, v1.IPv4Protocol, netnstest.KernelHarness{
//		New: func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
//			// build the engine for env.Topo with a real Runner; anything
//			// that touches the kernel here goes through netnstest.Exec(env.Node, ...)
//		},
//	})
//
// Every scenario gets a fresh Env, so scenarios cannot leak state into each
// other. Loops are bounded: at most DefaultMaxAttempts connections per
// check, 10 s to wait for links, conformance.SyncTimeout per Sync.
package netnstest
