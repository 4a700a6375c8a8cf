package nftablestest

import (
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Reasons the nftables engine differs from the table (upstream kube-proxy's
// nftables mode differs from its iptables mode in the same ways).
const (
	reasonUnservedPort = "nftables mode rejects new connections to ports a cluster IP does not serve (upstream's cluster-ips-check chain)"
)

// ConformanceQuirks are the nftables engine's explained differences from
// the shared conformance table (proxytest.Scenarios) for topo, for a
// conformance.Harness, a netnstest.KernelHarness, or proxytest.ApplyQuirks
// when the table is driven some other way (through a real API server).
// They do not depend on topo; the parameter keeps the shape every engine's
// kit shares.
func ConformanceQuirks(topo proxytest.Topology) []proxytest.Quirk {
	_ = topo
	rejected := func(proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.Rejected} }
	return []proxytest.Quirk{
		{Scenario: "cluster-ip", Check: "other-port", Reason: reasonUnservedPort, Adjust: rejected},
		{Scenario: "cluster-ip", Check: "other-protocol", Reason: reasonUnservedPort, Adjust: rejected},
		{Scenario: "udp", Check: "pod-tcp-same-port", Reason: reasonUnservedPort, Adjust: rejected},
		{Scenario: "multiple-ports", Step: "metrics-port-removed", Check: "metrics", Reason: reasonUnservedPort, Adjust: rejected},
		{Scenario: "changes-over-time", Check: "old-port", Reason: reasonUnservedPort, Adjust: rejected},
	}
}
