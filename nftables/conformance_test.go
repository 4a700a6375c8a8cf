//go:build linux

package nftables_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// conformanceConfig is the configuration the conformance topology asks
// for: ClusterCIDR local detection, node ports on the node IP.
func conformanceConfig(topo proxytest.Topology, opts proxytest.Options) nftables.Config {
	return nftables.Config{
		Common: engine.Common{
			IPFamily: topo.Family,
			NodeName: topo.NodeName,
			NodeIPs:  []netip.Addr{topo.NodeIP},
		},
		MasqueradeAll:     opts.MasqueradeAll,
		LocalDetector:     nftables.LocalDetector{Mode: nftables.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
		NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{topo.NodeIP, topo.PodGateway}, nil
		},
	}
}

// conformanceQuirks are where nftables mode legitimately differs from the
// table, as upstream kube-proxy's nftables mode does.
var conformanceQuirks = func() []proxytest.Quirk {
	const unservedPort = "nftables mode rejects new connections to ports a cluster IP does not serve (upstream's cluster-ips-check chain)"
	rejected := func(proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.Rejected} }
	dropped := func(proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.Dropped} }
	return []proxytest.Quirk{
		{Scenario: "cluster-ip", Check: "other-port", Reason: unservedPort, Adjust: rejected},
		{Scenario: "cluster-ip", Check: "other-protocol", Reason: unservedPort, Adjust: rejected},
		{Scenario: "udp", Check: "pod-tcp-same-port", Reason: unservedPort, Adjust: rejected},
		{Scenario: "multiple-ports", Step: "metrics-port-removed", Check: "metrics", Reason: unservedPort, Adjust: rejected},
		{Scenario: "changes-over-time", Check: "old-port", Reason: unservedPort, Adjust: rejected},
		{Scenario: "external-traffic-policy-local", Step: "remote-only", Check: "node-lb", Adjust: dropped,
			Reason: "nftables mode drops the node's own connections to a load-balancer IP of an eTP Local service without local endpoints: " +
				"filter-output (priority dstnat-10) checks no-endpoint-services before nat-output short-circuits them (as upstream)"},
	}
}()

func conformanceHarness(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
	fakes := nftablestest.NewFakes(topo.Family)
	p, err := nftables.NewProxier(conformanceConfig(topo, opts), fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	tr := nftablestest.NewTracer(fakes, nftablestest.TracerConfig{
		NodeIPs:           []netip.Addr{topo.NodeIP, topo.PodGateway},
		ExternalInterface: topo.UplinkInterface,
	})
	return p, tr
}

func TestConformanceIPv4(t *testing.T) {
	conformance.Run(t, v1.IPv4Protocol, conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks})
}

func TestConformanceIPv6(t *testing.T) {
	conformance.Run(t, v1.IPv6Protocol, conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks})
}
