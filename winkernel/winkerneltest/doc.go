// Package winkerneltest is the test kit of package winkernel: FakeHNS, a
// stateful in-memory HNS that refuses what HNS refuses (duplicate
// VIP/protocol/port, unknown endpoint IDs, more than 1,024 backends, an
// IPv6 address without the IPv6 flag, updates without the
// ModifyLoadBalancer feature), counts calls and injects faults with the
// shared proxytest.Faults verbs, leaks deletes and deletes out of band on
// request, renders its state with Dump and reads such text back with
// ParseDump (NewFakesFromDump seeds a kit from it); and Tracer, which answers
// where a packet goes under the load balancers the fake holds
// (proxytest.Tracer).
//
// The kit vocabulary is the one of every …test package: Fakes, NewFakes,
// Fakes.Interfaces, Fakes.Dump and NewTracer. Everything here runs on
// every OS; the tracer's model of HNS (when it SNATs, no reject) is
// documented on Tracer and has not been checked against a Windows host.
package winkerneltest
