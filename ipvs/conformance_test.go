package ipvs_test

import (
	"testing"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// conformanceHarness runs the shared conformance table through the fakes
// and the ipvstest tracer.
func conformanceHarness(topo proxytest.Topology) conformance.Harness {
	return conformance.Harness{
		Quirks: ipvstest.ConformanceQuirks(topo),
		New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
			e := newEnvFor(t, topo, ipvs.Config{
				Common: engine.Common{IPFamily: topo.Family, NodeName: topo.NodeName, Logger: testr.New(t)},
				Netfilter: engine.Netfilter{
					MasqueradeAll: opts.MasqueradeAll,
					LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
				},
			})
			tr := ipvstest.NewTracer(e.f, ipvstest.TracerConfig{
				PodInterface:      topo.ClientPod.HostInterface,
				ExternalInterface: topo.UplinkInterface,
			})
			return e.p, tr
		},
	}
}

func TestConformance(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			conformance.Run(t, fam, conformanceHarness(proxytest.DefaultTopology(fam)))
		})
	}
}

// TestConformanceSequential: the whole table through one proxier, one
// event at a time (conformance.RunSequential).
func TestConformanceSequential(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			conformance.RunSequential(t, topo, proxytest.Scenarios(topo), conformanceHarness(topo), 5)
		})
	}
}
