// Package ipvstest has stateful fakes of the ipvs engine's kernel
// interfaces and a packet tracer over them, for tests of the engine and of
// code that embeds it (like net/http/httptest). It speaks the vocabulary
// of every …test kit:
//
//   - NewFakes(family) returns the one bundle, Fakes{IPVS, IPSet, Netlink,
//     IPTables, Sysctl}; Interfaces() hands them to ipvs.NewProxier, Dump()
//     renders the whole node (`ipvsadm -Ln`, kube-ipvs0's addresses,
//     `ipset list`, `iptables-save`).
//   - IPVS (ipvs.Interface), IPSet (ipvs.IPSet), Netlink (ipvs.Netlink) and
//     Sysctl (ipvs.Sysctl) keep real state, enforce what the kernel enforces
//     (duplicate adds fail with ipvs.ErrExists, missing objects with
//     ipvs.ErrNotFound, entries must fit their set's type and family,
//     ipset names at most 31 characters) and render it with Dump in the form
//     of `ipvsadm -Ln`, `ipset list` and `ip addr show`. IPVS.Load seeds a
//     table from such a dump; the others are seeded through their methods
//     (Netlink.AddLink for the node's own links). The iptables fake is
//     xtablestest.Fake.
//   - Every fake embeds proxytest.Faults: it counts calls per method (Calls,
//     CallsOf, ResetCalls; Mutations and Deletions sum the changing ones)
//     and injects failures with the verbs every kit shares:
//     FailOn(method, n, err) fails the next n calls of a method ("*" for
//     all) without changing state; FailAfter lets some through first; Heal
//     removes them.
//   - NewTracer(fakes, cfg) implements proxytest.Tracer over the fakes: it
//     runs the packet through iptables (with -m set answered by the IPSet
//     fake) and then through the IPVS virtual server of its destination.
//
// The fakes are safe for concurrent use.
package ipvstest
