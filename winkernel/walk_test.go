package winkernel_test

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/winkernel"
)

// The conformance table with every scenario's steps in random order,
// three rounds: every transition converges, not only the listed ones.
func TestConformanceShuffled(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			topo := proxytest.DefaultTopology(family)
			scenarios := proxytest.Scenarios(topo)
			shuffled := proxytest.Shuffle(scenarios, 13, 3)
			conformance.RunScenarios(t, topo, shuffled, conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks(topo, scenarios)})
		})
	}
}

// states are variations of world: each a whole state of the cluster.
func states(topo proxytest.Topology) []proxytest.Objects {
	base := world(topo)
	var out []proxytest.Objects
	out = append(out, base, proxytest.Objects{})
	for i := range base.Services {
		// Without service i.
		s := proxytest.Objects{EndpointSlices: base.EndpointSlices}
		s.Services = append(append([]*v1.Service{}, base.Services[:i]...), base.Services[i+1:]...)
		out = append(out, s)
	}
	for i := range base.EndpointSlices {
		// Without slice i, and with slice i holding one local pod.
		s := proxytest.Objects{Services: base.Services}
		s.EndpointSlices = append(append([]*discovery.EndpointSlice{}, base.EndpointSlices[:i]...), base.EndpointSlices[i+1:]...)
		out = append(out, s)
		s2 := proxytest.Objects{Services: base.Services}
		s2.EndpointSlices = append([]*discovery.EndpointSlice{}, base.EndpointSlices...)
		sl := s2.EndpointSlices[i].DeepCopy()
		sl.Endpoints = sl.Endpoints[:1]
		s2.EndpointSlices[i] = sl
		out = append(out, s2)
	}
	return out
}

// TestRandomWalkConverges walks the states in random order (with
// partial syncs, as Run does) and checks after each step that HNS holds
// exactly what a fresh engine would write for that state, and that a
// restart over it writes nothing.
func TestRandomWalkConverges(t *testing.T) {
	for _, typ := range []winkernel.NetworkType{winkernel.NetworkOverlay, winkernel.NetworkL2Bridge} {
		t.Run(string(typ), func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			all := states(topo)
			mutate := func(c *winkernel.Config) {
				if !typ.IsOverlay() {
					c.SourceVIP = netip.Addr{}
				}
			}
			want := make([]string, len(all))
			for i, objs := range all {
				f := newTopoFakes(topo, typ)
				p := newTopoProxier(t, topo, f, mutate)
				mustSync(t, proxytest.NewFeeder(p), p, objs)
				want[i] = f.Dump()
			}
			f := newTopoFakes(topo, typ)
			p := newTopoProxier(t, topo, f, mutate)
			feeder := proxytest.NewFeeder(p)
			r := rand.New(rand.NewPCG(7, 11))
			for step := 0; step < 60; step++ {
				i := r.IntN(len(all))
				mustSync(t, feeder, p, all[i])
				if got := f.Dump(); got != want[i] {
					t.Fatalf("step %d (state %d, %s sync):\n%s\nwant\n%s", step, i, fullOrPartial(p), got, want[i])
				}
			}
			f.HNS.ResetCalls()
			p2 := newTopoProxier(t, topo, f, mutate)
			last := r.IntN(len(all))
			mustSync(t, feeder, p, all[last])
			f.HNS.ResetCalls()
			mustSync(t, proxytest.NewFeeder(p2), p2, all[last])
			if n := writes(f); n != 0 {
				t.Errorf("restart wrote %d times: %v", n, f.HNS.Calls())
			}
		})
	}
}

func fullOrPartial(p *winkernel.Proxier) string {
	if p.Stats().Last.Full {
		return "full"
	}
	return "partial"
}

// TestDriftCheck: Run notices an out-of-band delete through the drift
// check and restores the load balancer with a full sync.
func TestDriftCheck(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, func(c *winkernel.Config) {
		c.DriftCheckInterval = 5 * time.Millisecond
		c.MinSyncPeriod = -1
	})
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	want := f.Dump()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	f.HNS.DeleteOutOfBand(f.HNS.LoadBalancers()[2].ID)
	deadline := time.Now().Add(10 * time.Second)
	for f.Dump() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the drift check did not restore the deleted LB:\n%s", f.Dump())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.Stats().Last.Reason != "drift" {
		t.Logf("last sync reason %q", p.Stats().Last.Reason)
	}
}
