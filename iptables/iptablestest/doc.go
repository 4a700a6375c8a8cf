// Package iptablestest is the iptables engine's test kit, in the shape
// every …test package shares: Fakes (the bundle of what an
// iptables.Proxier drives: an iptables Fake and a Sysctl for
// route_localnet), NewFakes(family), Fakes.Interfaces() for
// iptables.NewProxier, Fakes.Dump(), and NewTracer(fakes, TracerConfig).
//
// The Fake (a stateful xtables.Runner) and the Tracer over it are the
// driver's, in package iptables/xtables/xtablestest, which imports no
// engine; this package names them too (Fake, NewFake, NewFakeFromDump,
// TracerConfig, ...), and its NewTracer reads route_localnet from the
// fakes' Sysctl. See xtablestest for what the Fake validates and how the
// Tracer walks the chains.
package iptablestest
