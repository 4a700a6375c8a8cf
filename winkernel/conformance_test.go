package winkernel_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/winkernel"
)

func conformanceHarness(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
	if opts.MasqueradeAll {
		t.Skip("winkernel has no masquerade-all option (HNS SNATs by load-balancer kind, see winkerneltest.Tracer)")
	}
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	return p, topoTracer(topo, f)
}

func runConformance(t *testing.T, family v1.IPFamily) {
	topo := proxytest.DefaultTopology(family)
	scenarios := proxytest.Scenarios(topo)
	conformance.RunScenarios(t, topo, scenarios, conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks(topo, scenarios)})
}

func TestConformanceIPv4(t *testing.T) { runConformance(t, v1.IPv4Protocol) }
func TestConformanceIPv6(t *testing.T) { runConformance(t, v1.IPv6Protocol) }

// TestConformanceSequential: the whole table through one proxier, one
// event at a time (conformance.RunSequential).
func TestConformanceSequential(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			scenarios := proxytest.Scenarios(topo)
			conformance.RunSequential(t, topo, scenarios, conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks(topo, scenarios)}, 5)
		})
	}
}
