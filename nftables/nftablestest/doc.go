// Package nftablestest is the test kit of package nftables: a stateful fake
// of the knftables interface (knftables.Fake as the store, with
// proxytest.Faults for fault injection and call counts) and a packet
// tracer that answers, from the table the fake holds, where a packet
// goes (proxytest.Tracer), so the cross-mode conformance table runs
// through it. Linux only, as package nftables.
package nftablestest
