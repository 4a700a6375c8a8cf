package winkernel_test

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
)

// TestFaultsConverge fails each HNS operation in turn, once and always,
// during a change from one state to another (the sync after is full:
// the base makes it so), and checks that the engine then converges to
// what a fresh engine writes for the new state.
func TestFaultsConverge(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	all := states(topo)
	from, to := all[0], all[2] // the world, then without "web"
	to.EndpointSlices = append(to.EndpointSlices[:0:0], to.EndpointSlices...)
	to.EndpointSlices[1] = proxytest.MakeSlice(topo, "sticky", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}},
		proxytest.EndpointSpec{Pod: topo.LocalPods[1]}, proxytest.EndpointSpec{Pod: topo.RemotePods[1]})
	// And a new service, so that load balancers are created too.
	http := []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}
	to.Services = append(to.Services[:len(to.Services):len(to.Services)], proxytest.MakeService(topo, "new", topo.ServiceIP(50), http, nil))
	to.EndpointSlices = append(to.EndpointSlices, proxytest.MakeSlice(topo, "new", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}},
		proxytest.EndpointSpec{Pod: topo.LocalPods[0]}))

	clean := newTopoFakes(topo, winkernel.NetworkOverlay)
	pc := newTopoProxier(t, topo, clean, nil)
	mustSync(t, proxytest.NewFeeder(pc), pc, to)
	want := clean.Dump()

	boom := errors.New("injected HNS failure")
	for _, op := range []string{"GetNetworkByName", "ListEndpoints", "ListLoadBalancers", "CreateEndpoint", "DeleteEndpoint",
		"CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"} {
		for _, count := range []int{1, -1} {
			t.Run(op, func(t *testing.T) {
				f := newTopoFakes(topo, winkernel.NetworkOverlay)
				p := newTopoProxier(t, topo, f, nil)
				feeder := proxytest.NewFeeder(p)
				mustSync(t, feeder, p, from)
				f.HNS.FailOn(op, count, boom)
				f.HNS.ResetCalls()
				p.RequestFullSync() // so that the listings are part of it too
				err := syncTo(t, feeder, p, to)
				if f.HNS.CallsOf(op) == 0 {
					t.Fatalf("the change made no %s call: the fault is not tested", op)
				}
				if err != nil && !errors.Is(err, boom) {
					t.Fatalf("Sync: %v, want nil or the injected error", err)
				}
				if count < 0 {
					// Still failing: the next sync fails the same way and
					// loses nothing.
					if err2 := p.Sync(context.Background()); (err == nil) != (err2 == nil) {
						t.Fatalf("second sync under the fault: %v, first: %v", err2, err)
					}
					f.HNS.Heal()
				}
				for i := 0; i < 2; i++ {
					if err := p.Sync(context.Background()); err != nil {
						t.Fatalf("sync %d after healing: %v", i, err)
					}
				}
				if got := f.Dump(); got != want {
					t.Errorf("after %s failed (count %d):\n%s\nwant\n%s", op, count, got, want)
				}
			})
		}
	}
}
