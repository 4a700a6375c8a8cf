// Package conformance runs the cross-mode conformance table of package
// proxytest against an engine, from that engine's tests: it builds a fresh
// engine for every scenario, feeds it the scenario's steps as informer
// events, calls Sync, and checks every packet with the engine's tracer.
//
// It is a package of its own because it imports package testing; proxytest,
// which the shipped fakes and the reference binary's dry run use for the
// tracer vocabulary, does not. Import conformance from tests and test
// helpers (such as internal/netnstest) only, never from code a binary links.
//
// # What an engine's test supplies
//
// An engine joins the table with one test per IP family and a Harness:
//
//	func TestConformanceIPv4(t *testing.T) {
//		conformance.Run(t, v1.IPv4Protocol, conformance.Harness{
//			New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
//				// build a fresh engine configured for topo (node name, node IP,
//				// cluster CIDR as the local-traffic detector, opts.MasqueradeAll)
//				// over its fake, and return it with the fake's tracer.
//			},
//			Quirks: nil, // explained differences, as few as possible
//		})
//	}
//
// RunScenarios takes a chosen list instead of the whole table. With
// proxytest.Shuffle it replays each scenario's steps in random orders
// (every step is a complete state), which shows that every transition
// converges:
//
//	conformance.RunScenarios(t, topo, proxytest.Shuffle(proxytest.Scenarios(topo), seed, 3), h)
//
// The real-kernel variant is internal/netnstest.RunKernel, which runs this
// runner over the same topology built in network namespaces, with a tracer
// that answers with real packets. A harness that cannot hand the runner a
// Provider (one that drives an engine through a real API server, say)
// applies its quirks with proxytest.ApplyQuirks and walks the table itself.
//
// # Guarantees
//
//   - The table is validated (proxytest.Validate) and the quirks with it
//     (proxytest.ApplyQuirks) before any engine is built: a quirk without a
//     Reason, or one that matches no check of its scenario, fails the run.
//   - Every scenario gets a fresh engine from Harness.New, inside its own
//     subtest named after the scenario.
//   - The runner checks that Sync returns proxy.ErrNotSynced before the
//     initial lists are reported synced, then feeds each step as the
//     add/update/delete events an informer would deliver
//     (proxytest.Feeder) and calls Sync, bounded by SyncTimeout, before
//     tracing.
//   - Every failure names scenario, step and check, and shows the packet,
//     the wanted and the actual result, and why they differ
//     (proxytest.Match); a tracer with a Dump() string method has its
//     dataplane logged after a step with a failure. A check a quirk skips
//     is logged with the quirk's Reason.
//   - A failed Sync ends its scenario; a mismatching check does not, and
//     the remaining steps still run.
//   - Tracers that observe real traffic (proxytest.Sampler) are asked
//     through TraceSample, with the wanted result as the hint of when to
//     stop sampling.
package conformance
