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
		Netfilter: engine.Netfilter{
			MasqueradeAll:     opts.MasqueradeAll,
			LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
			NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
		},
		LocalAddresses: func() ([]netip.Addr, error) {
			return []netip.Addr{topo.NodeIP, topo.PodGateway}, nil
		},
	}
}

// conformanceQuirks are where nftables mode legitimately differs from the
// table (nftablestest.ConformanceQuirks, which the e2e uses too).
var conformanceQuirks = nftablestest.ConformanceQuirks(proxytest.Topology{})

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

// TestConformanceSequential: the whole table through one proxier, one
// event at a time (conformance.RunSequential).
func TestConformanceSequential(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			conformance.RunSequential(t, topo, proxytest.Scenarios(topo), conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks}, 5)
		})
	}
}
