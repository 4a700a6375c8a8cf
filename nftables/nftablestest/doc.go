// Package nftablestest is the test kit of package nftables: a stateful fake
// of the knftables interface (knftables.Fake as the store, with
// proxytest.Faults for fault injection and call counts) and a packet
// tracer that answers, from the table the fake holds, where a packet
// goes (proxytest.Tracer), so the cross-mode conformance table runs
// through it. A node's packet to one of its own addresses (loopback
// included) is followed on into the input hook, where localhost node
// ports are rejected; what the localhost node-port proxy serves is not in
// the table, so the tracer reports it NotProxied (the proxy's socket);
// LocalhostSockets is a fake of that proxy's sockets over kernel-chosen
// loopback ports. Linux only, as package nftables.
package nftablestest
