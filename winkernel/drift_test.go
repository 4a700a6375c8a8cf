package winkernel_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// TestDriftCheckEndpoints: the drift check lists the LBs and our network's
// endpoints once each, and finds a remote endpoint of ours or the source
// VIP endpoint deleted behind our back (not only LBs); the full sync it
// asks for restores the same state. A remote endpoint that is not ours
// going away is no drift.
func TestDriftCheckEndpoints(t *testing.T) {
	ctx := context.Background()
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, tc := range []struct {
		name  string
		drift bool
		gone  func(f *winkerneltest.Fakes) winkernel.Endpoint
	}{
		{"remote endpoint of a service", true, func(f *winkerneltest.Fakes) winkernel.Endpoint {
			return findEndpoint(t, f, func(ep winkernel.Endpoint) bool { return ep.Remote && ep.IP == topo.RemotePods[0].IP })
		}},
		{"source VIP endpoint", true, func(f *winkerneltest.Fakes) winkernel.Endpoint {
			return findEndpoint(t, f, func(ep winkernel.Endpoint) bool { return ep.IP == sourceVIP(topo) })
		}},
		{"someone else's remote endpoint", false, func(f *winkerneltest.Fakes) winkernel.Endpoint {
			ep, err := f.HNS.CreateEndpoint(networkID(t, f), winkernel.Endpoint{Name: "other", IP: topo.RemotePods[0].IP.Next().Next().Next(), Remote: true})
			if err != nil {
				t.Fatal(err)
			}
			return ep
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTopoFakes(topo, winkernel.NetworkOverlay)
			p := newTopoProxier(t, topo, f, nil)
			mustSync(t, proxytest.NewFeeder(p), p, world(topo))
			gone := tc.gone(f) // before the dump: a foreign endpoint is added first
			want := f.Dump()
			f.HNS.ResetCalls()
			if drift, err := winkernel.Drifted(ctx, p); err != nil || drift {
				t.Fatalf("drift %v, %v before any change", drift, err)
			}
			if c := f.HNS.Calls(); c["ListLoadBalancers"] != 1 || c["ListEndpoints"] != 1 || len(c) != 2 {
				t.Errorf("a drift check made %v, want one listing of each", c)
			}
			f.HNS.RemoveEndpointOutOfBand(gone.ID)
			drift, err := winkernel.Drifted(ctx, p)
			if err != nil || drift != tc.drift {
				t.Fatalf("after deleting %s: drift %v, %v; want %v", gone.IP, drift, err, tc.drift)
			}
			if !tc.drift {
				return
			}
			p.RequestFullSync() // what Run does on drift
			if err := p.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := f.Dump(); got != want {
				t.Errorf("not restored:\n%s\nwant:\n%s", got, want)
			}
			if drift, err := winkernel.Drifted(ctx, p); err != nil || drift {
				t.Errorf("drift %v, %v after the full sync", drift, err)
			}
		})
	}
}

func findEndpoint(t *testing.T, f *winkerneltest.Fakes, match func(winkernel.Endpoint) bool) winkernel.Endpoint {
	t.Helper()
	for _, ep := range f.HNS.Endpoints() {
		if match(ep) {
			return ep
		}
	}
	t.Fatalf("no such endpoint in:\n%s", f.Dump())
	return winkernel.Endpoint{}
}

func networkID(t *testing.T, f *winkerneltest.Fakes) string {
	t.Helper()
	n, err := f.HNS.GetNetworkByName(winkerneltest.NetworkName)
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}
