package winkernel_test

import (
	"context"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// orphanWorld is a synced HNS plus, as left by earlier runs and other
// programs, LBs whose endpoints are (partly) gone. It returns the IDs of
// the LB that is ours by rule 3 of the ownership rule and of those that
// are not.
func orphanWorld(t *testing.T, topo proxytest.Topology, typ winkernel.NetworkType) (f *winkerneltest.Fakes, orphan string, foreign map[string]string) {
	f = newTopoFakes(topo, typ)
	p := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	p.Close()
	f.HNS.AddNetwork(winkernel.Network{Name: "other", Type: winkernel.NetworkL2Bridge})
	otherEP, err := f.HNS.AddLocalEndpoint("other", "x", netip.MustParseAddr("172.16.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	lb := func(vip string, src netip.Addr, ids ...string) string {
		return f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
			FrontendVIPs: []netip.Addr{netip.MustParseAddr(vip)}, SourceVIP: src,
			Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80, EndpointIDs: ids,
		})
	}
	orphan = lb("10.96.1.1", sourceVIP(topo), "ep-gone-1", "ep-gone-2")
	foreign = map[string]string{
		"node IP as source VIP, endpoints gone":         lb("10.96.1.2", topo.NodeIP, "ep-gone-3"),
		"other source VIP, endpoints gone":              lb("10.96.1.3", netip.MustParseAddr("172.16.0.1"), "ep-gone-4"),
		"our source VIP, endpoint on another network":   lb("10.96.1.4", sourceVIP(topo), otherEP),
		"our source VIP, one gone, one on another net.": lb("10.96.1.5", sourceVIP(topo), "ep-gone-5", otherEP),
	}
	return f, orphan, foreign
}

func lbIDs(f *winkerneltest.Fakes) map[string]bool {
	ids := map[string]bool{}
	for _, lb := range f.HNS.LoadBalancers() {
		ids[lb.ID] = true
	}
	return ids
}

// TestOrphanedLBsOfOursAreDeleted: in a fresh process, Cleanup and the
// first sync recognise an LB of an earlier run whose endpoints are all
// gone by its source VIP (the overlay network's own), and delete it; LBs
// with the node IP or another source VIP, or naming an endpoint that
// exists on another network, are never touched.
func TestOrphanedLBsOfOursAreDeleted(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, step := range []string{"cleanup", "sync"} {
		t.Run(step, func(t *testing.T) {
			f, orphan, foreign := orphanWorld(t, topo, winkernel.NetworkOverlay)
			p := newTopoProxier(t, topo, f, nil)
			if step == "cleanup" {
				if err := p.Cleanup(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else {
				mustSync(t, proxytest.NewFeeder(p), p, world(topo))
			}
			ids := lbIDs(f)
			if ids[orphan] {
				t.Errorf("the orphaned LB of ours was kept:\n%s", f.Dump())
			}
			for what, id := range foreign {
				if !ids[id] {
					t.Errorf("a foreign LB (%s) was deleted:\n%s", what, f.Dump())
				}
			}
		})
	}
}

// TestOrphanedLBsOnL2BridgeAreKept: on l2bridge the source VIP is no
// address of the network's own, so an LB whose endpoints are all gone is
// nobody's we can name: kept, even with the configured source VIP.
func TestOrphanedLBsOnL2BridgeAreKept(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f, orphan, foreign := orphanWorld(t, topo, winkernel.NetworkL2Bridge)
	p := newTopoProxier(t, topo, f, nil)
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	ids := lbIDs(f)
	if !ids[orphan] {
		t.Errorf("an LB with gone endpoints was deleted on l2bridge:\n%s", f.Dump())
	}
	for what, id := range foreign {
		if !ids[id] {
			t.Errorf("a foreign LB (%s) was deleted:\n%s", what, f.Dump())
		}
	}
}
