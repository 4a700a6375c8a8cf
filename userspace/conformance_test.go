package userspace_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// quirks lists where the userspace engine knowingly differs from the
// conformance table.
func quirks(topo proxytest.Topology) []proxytest.Quirk {
	var qs []proxytest.Quirk
	for _, sc := range proxytest.Scenarios(topo) {
		for _, st := range sc.Steps {
			for _, c := range st.Checks {
				if c.Want.Verdict == proxytest.Forwarded && !c.Want.Masquerade {
					qs = append(qs, proxytest.Quirk{Scenario: sc.Name, Step: st.Name, Check: c.Name,
						Reason: "the userspace proxy opens the backend connection itself, so backends always see the node's address",
						Adjust: func(w proxytest.Result) proxytest.Result { w.Masquerade = true; return w }})
				}
			}
		}
	}
	return qs
}

// harness builds a CaptureIPTables proxier over xtablestest.Fake, with
// real proxy sockets on the unspecified address at kernel-chosen ports (no
// root needed), traced by userspacetest.Tracer.
func harness(t *testing.T, topo proxytest.Topology, _ proxytest.Options) (proxy.Provider, proxytest.Tracer) {
	fakes := userspacetest.NewFakes(topo.Family)
	p, err := userspace.NewProxier(userspace.Config{
		Common:       engine.Common{NodeName: topo.NodeName, IPFamily: topo.Family, NodeIPs: []netip.Addr{topo.NodeIP}},
		HostIP:       topo.NodeIP,
		ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR},
	}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, userspacetest.NewTracer(fakes, userspacetest.TracerConfig{Proxier: p})
}

func TestConformanceIPv4(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	conformance.Run(t, v1.IPv4Protocol, conformance.Harness{New: harness, Quirks: quirks(topo)})
}

func TestConformanceIPv6(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv6Protocol)
	conformance.Run(t, v1.IPv6Protocol, conformance.Harness{New: harness, Quirks: quirks(topo)})
}

// TestConformanceSequential: the whole table through one proxier, one
// event at a time (conformance.RunSequential).
func TestConformanceSequential(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			conformance.RunSequential(t, topo, proxytest.Scenarios(topo), conformance.Harness{New: harness, Quirks: quirks(topo)}, 5)
		})
	}
}
