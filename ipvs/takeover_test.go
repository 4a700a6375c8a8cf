package ipvs_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// TestPartialSyncTakeover: one service goes and another takes what it had
// (its node port, its cluster IP) in the same partial sync. Ops run
// additions first and removals last, so the removal must not be planned at
// all: the kernel keeps the virtual server, the address and the set entry,
// now the new service's. (The e2e found it: the node port of the
// load-balancer scenario's service taken over by the next scenario's was
// refused until a change touched it again.) Map order decides which service
// is replanned first, so each case runs many times.
func TestPartialSyncTakeover(t *testing.T) {
	np := netip.AddrPortFrom(nodeIP, 30080)
	for i := range 20 {
		for _, tc := range []struct {
			name        string
			first, next string // service names (either order sorts first)
			firstIP     string
			nextIP      string
		}{
			{"node-port", "a", "b", "10.96.0.1", "10.96.0.2"},
			{"node-port-reversed", "b", "a", "10.96.0.1", "10.96.0.2"},
			{"cluster-ip-reused", "a", "b", "10.96.0.1", "10.96.0.1"},
			{"cluster-ip-reused-reversed", "b", "a", "10.96.0.1", "10.96.0.1"},
		} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, i), func(t *testing.T) {
				e := newEnv(t, config(engine.Common{NodeName: testNode}))
				e.synced()
				oldSvc := service("ns", tc.first, tc.firstIP, 80, withNodePort(30080))
				oldSlice := slice("ns", tc.first, 80, v1.ProtocolTCP, ready("10.244.1.2", testNode))
				e.p.OnServiceAdd(oldSvc)
				e.p.OnEndpointSliceAdd(oldSlice)
				e.sync(t)
				e.p.OnServiceDelete(oldSvc)
				e.p.OnEndpointSliceDelete(oldSlice)
				e.p.OnServiceAdd(service("ns", tc.next, tc.nextIP, 80, withNodePort(30080)))
				e.p.OnEndpointSliceAdd(slice("ns", tc.next, 80, v1.ProtocolTCP, ready("10.244.1.3", testNode)))
				e.sync(t)
				if e.last().Full {
					t.Fatalf("the second sync was full; want partial")
				}
				want := netip.MustParseAddrPort("10.244.1.3:80")
				for _, vs := range []netip.AddrPort{np, netip.AddrPortFrom(netip.MustParseAddr(tc.nextIP), 80)} {
					_, rss, ok := e.ipvs.Lookup(ipvs.VirtualServerKey{Address: vs.Addr(), Port: vs.Port(), Protocol: v1.ProtocolTCP})
					if !ok {
						t.Fatalf("virtual server %s is gone after the takeover:\n%s", vs, e.dump())
					}
					var got []string
					for _, rs := range rss {
						got = append(got, fmt.Sprintf("%s weight %d", rs.AddrPort(), rs.Weight))
					}
					if !slices.Contains(got, want.String()+" weight 1") {
						t.Errorf("virtual server %s has real servers %v, want %s at weight 1", vs, got, want)
					}
				}
				if !e.ipset.Has("KUBE-NODE-PORT-TCP", ipvs.Entry{Port: 30080}) {
					t.Errorf("KUBE-NODE-PORT-TCP lost port 30080 in the takeover:\n%s", e.dump())
				}
				bound, _ := e.nl.ListBindAddresses(ipvs.DummyDevice)
				if !slices.Contains(bound, netip.MustParseAddr(tc.nextIP)) {
					t.Errorf("%s is not bound to %s after the takeover (bound: %v)", tc.nextIP, ipvs.DummyDevice, bound)
				}
			})
		}
	}
}
