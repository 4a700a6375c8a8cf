// Package proxytest is the cross-mode conformance table of svcproxy: the
// shared vocabulary of packet tracers (Packet, Origin, Verdict, Result,
// Tracer), one Topology that every engine is tested against, the table of
// Scenarios, and the runner that feeds a scenario to an engine and checks
// every packet.
//
// # What an engine's test supplies
//
// An engine joins the table with one test per IP family:
//
//	func TestConformanceIPv4(t *testing.T) {
//		proxytest.Run(t, v1.IPv4Protocol, proxytest.Harness{
//			New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
//				// build a fresh engine configured for topo (node name, node IP,
//				// cluster CIDR as the local-traffic detector, opts.MasqueradeAll)
//				// over its fake, and return it with the fake's tracer.
//			},
//			Quirks: nil, // explained differences, as few as possible
//		})
//	}
//
// Shuffle replays each scenario's steps in random orders (every step is a
// complete state), which shows that every transition converges:
//
//	proxytest.RunScenarios(t, topo, proxytest.Shuffle(proxytest.Scenarios(topo), seed, 3), h)
//
// The real-kernel variant is internal/netnstest.RunKernel, which builds the
// same topology in network namespaces and answers with real packets.
//
// # Guarantees
//
//   - Scenarios(topo) is deterministic and valid for topo (Validate): every
//     packet's source matches its Origin, every port has a listener in the
//     real-kernel harness, every wanted backend is a pod.
//   - The runner gives each scenario a fresh engine, checks that Sync
//     returns proxy.ErrNotSynced before the initial lists are reported
//     synced, then feeds each step as the add/update/delete events an
//     informer would deliver (Feeder) and calls Sync before tracing.
//   - Every failure names scenario, step and check, and shows the packet,
//     the wanted and the actual result, and why they differ.
//   - Quirks are explicit: each has a reason, and a quirk that matches no
//     check of its scenario fails the run.
//   - Expectations follow kube-proxy's iptables mode; where another mode
//     legitimately differs, its test states so with a Quirk.
//
// Tracers that observe real traffic (Sampler) get the wanted result as a
// hint of when to stop sampling, and are compared leniently only where
// sampling cannot see everything: a sticky service shows one backend.
package proxytest
