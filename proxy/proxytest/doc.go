// Package proxytest is the cross-mode conformance table of svcproxy: the
// shared vocabulary of packet tracers (Packet, Origin, Verdict, Result,
// Tracer, Sampler), one Topology that every engine is tested against, the
// table of Scenarios, Quirks, and the Feeder that turns a step's objects
// into the events an informer would deliver.
//
// It does not import package testing: the shipped fakes and tracers
// (iptables/iptablestest, ipvs/ipvstest) speak this vocabulary, and the
// reference binary's dry run links them. The runner that feeds the table to
// an engine from its tests is package proxytest/conformance.
//
// # How an engine uses it
//
// An engine's test joins the table through the runner:
//
//	conformance.Run(t, v1.IPv4Protocol, conformance.Harness{New: newEngineAndTracer})
//
// Shuffle replays each scenario's steps in random orders (every step is a
// complete state), which shows that every transition converges:
//
//	conformance.RunScenarios(t, topo, proxytest.Shuffle(proxytest.Scenarios(topo), seed, 3), h)
//
// A harness that drives the table its own way (through a real API server,
// say) takes Scenarios, applies its quirks with ApplyQuirks, feeds each
// step with a Feeder and compares what its tracer answers with Match.
//
// # Guarantees
//
//   - Scenarios(topo) is deterministic and valid for topo (Validate): every
//     packet's source matches its Origin, every port has a listener in the
//     real-kernel harness, every wanted backend is a pod.
//   - The Feeder delivers each step as the add/update/delete events against
//     the previous step, never an event for an unchanged object.
//   - Quirks are explicit: each has a reason, and a quirk that matches no
//     check of its scenario is an error (ApplyQuirks), so the runner fails.
//   - Expectations follow kube-proxy's iptables mode; where another mode
//     legitimately differs, its test states so with a Quirk.
//
// Tracers that observe real traffic (Sampler) get the wanted result as a
// hint of when to stop sampling, and are compared leniently only where
// sampling cannot see everything: a sticky service shows one backend.
package proxytest
