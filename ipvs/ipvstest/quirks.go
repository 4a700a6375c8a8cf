package ipvstest

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Reasons the IPVS engine differs from the table (kube-proxy's ipvs mode
// differs from its iptables mode in the same ways).
const (
	reasonBoundVIP = "IPVS binds service addresses to kube-ipvs0, so they are local to the node; " +
		"KUBE-IPVS-FILTER rejects new connections to a port or protocol no service uses (as kube-proxy's ipvs mode)"
	reasonNoRealServer = "an IPVS virtual server with no real servers hands the packet to the local stack, " +
		"where nothing listens: the client gets a reset / port unreachable, not silence"
	reasonOneVirtualServer = "IPVS has one virtual server per address:port for every source, so traffic from " +
		"pods and the node to an externalTrafficPolicy Local service reaches only local endpoints " +
		"(kube-proxy's ipvs mode has no short-circuit for them either) and is not masqueraded"
)

// ConformanceQuirks are the IPVS engine's explained differences from the
// shared conformance table (proxytest.Scenarios) for topo, for a
// conformance.Harness, a netnstest.KernelHarness, or proxytest.ApplyQuirks
// when the table is driven some other way (through a real API server).
func ConformanceQuirks(topo proxytest.Topology) []proxytest.Quirk {
	rejected := func(proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.Rejected} }
	localOnly := func(want proxytest.Result) proxytest.Result {
		var keep []netip.AddrPort
		for _, b := range want.Backends {
			for _, p := range topo.LocalPods {
				if b.Addr() == p.IP {
					keep = append(keep, b)
				}
			}
		}
		if len(keep) == 0 {
			return proxytest.Result{Verdict: proxytest.Rejected}
		}
		return proxytest.Result{Verdict: proxytest.Forwarded, Backends: keep, Sticky: want.Sticky}
	}
	var q []proxytest.Quirk
	for _, c := range [][3]string{
		{"cluster-ip", "two-endpoints", "other-port"},
		{"cluster-ip", "two-endpoints", "other-protocol"},
		{"external-ips", "two-endpoints", "external-other-port"},
		{"load-balancer", "two-endpoints", "external-lb-other-port"},
		{"changes-over-time", "port-changed", "old-port"},
		{"changes-over-time", "service-recreated", "old-port"},
		{"multiple-ports", "metrics-port-removed", "metrics"},
		{"udp", "two-endpoints", "pod-tcp-same-port"},
	} {
		q = append(q, proxytest.Quirk{Scenario: c[0], Step: c[1], Check: c[2], Reason: reasonBoundVIP, Adjust: rejected})
	}
	for _, c := range [][3]string{
		{"external-traffic-policy-local", "remote-only", "external-lb"},
		{"external-traffic-policy-local", "remote-only", "external-node-port"},
		{"internal-traffic-policy-local", "remote-only", "node"},
		{"internal-traffic-policy-local", "remote-only", "pod"},
	} {
		q = append(q, proxytest.Quirk{Scenario: c[0], Step: c[1], Check: c[2], Reason: reasonNoRealServer, Adjust: rejected})
	}
	for _, c := range [][3]string{
		{"external-traffic-policy-local", "local-and-remote", "pod-lb"},
		{"external-traffic-policy-local", "local-and-remote", "pod-node-port"},
		{"external-traffic-policy-local", "local-and-remote", "node-lb"},
		{"external-traffic-policy-local", "local-and-remote", "node-node-port"},
		{"external-traffic-policy-local", "remote-only", "pod-node-port"},
		{"external-traffic-policy-local", "remote-only", "node-node-port"},
		{"external-traffic-policy-local", "remote-only", "pod-lb"},
		{"external-traffic-policy-local", "remote-only", "node-lb"},
	} {
		q = append(q, proxytest.Quirk{Scenario: c[0], Step: c[1], Check: c[2], Reason: reasonOneVirtualServer, Adjust: localOnly})
	}
	return q
}
