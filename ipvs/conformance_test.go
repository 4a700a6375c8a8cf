package ipvs_test

import (
	"testing"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
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
				IPFamily:      topo.Family,
				NodeName:      topo.NodeName,
				MasqueradeAll: opts.MasqueradeAll,
				LocalDetector: ipvs.LocalDetector{Mode: ipvs.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
				Logger:        testr.New(t),
			})
			tr := ipvstest.NewTracer(ipvstest.TracerConfig{
				Family:            topo.Family,
				PodInterface:      topo.ClientPod.HostInterface,
				ExternalInterface: topo.UplinkInterface,
			}, e.ipvs, e.ipset, e.nl, e.ipt)
			return e.p, dumpingTracer{tr, e}
		},
	}
}

// dumpingTracer adds Dump, which the conformance runner logs on failures.
type dumpingTracer struct {
	*ipvstest.Tracer
	e *env
}

func (d dumpingTracer) Dump() string { return d.e.dump() }

func TestConformance(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			conformance.Run(t, fam, conformanceHarness(proxytest.DefaultTopology(fam)))
		})
	}
}
