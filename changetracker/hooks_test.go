package changetracker

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// namedEndpoint is what a MakeEndpoint hook may keep: the base and the
// name pointer it was given.
type namedEndpoint struct {
	*proxy.BaseEndpoint
	name *proxy.ServicePortName
}

// TestMakeEndpointNames: the name a MakeEndpoint hook receives (and may
// keep a pointer to) is the port the endpoint is listed under, for one
// slice with one or several ports and for several slices, and stays so
// after later updates of the service.
func TestMakeEndpointNames(t *testing.T) {
	tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: "node-1", MakeEndpoint: func(base *proxy.BaseEndpoint, name *proxy.ServicePortName) proxy.Endpoint {
		return &namedEndpoint{BaseEndpoint: base, name: name}
	}})
	tr.OnEndpointSliceAdd(makeSlice("ns", "one", "one-a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.0.0.2"}, epSpec{ip: "10.0.0.1"}))
	tr.OnEndpointSliceAdd(makeSlice("ns", "multi", "multi-a", []int32{90, 80, 70}, v1.ProtocolUDP, epSpec{ip: "10.0.1.1"}, epSpec{ip: "10.0.1.1", notReady: true}))
	tr.OnEndpointSliceAdd(makeSlice("ns", "split", "split-b", []int32{81, 80}, v1.ProtocolTCP, epSpec{ip: "10.0.2.2"}))
	tr.OnEndpointSliceAdd(makeSlice("ns", "split", "split-a", []int32{80, 82}, v1.ProtocolTCP, epSpec{ip: "10.0.2.1"}, epSpec{ip: "10.0.2.2"}))
	check := func(u Update, want int) {
		t.Helper()
		n := 0
		for name, eps := range u.Endpoints {
			for _, ep := range eps {
				n++
				got := *ep.(*namedEndpoint).name
				if got != name {
					t.Errorf("endpoint %s listed under %v was made with the name %v", ep, name, got)
				}
				if ep.Port() != portOf(t, name.Port) {
					t.Errorf("endpoint %s listed under %v has port %d", ep, name, ep.Port())
				}
			}
		}
		if n != want {
			t.Errorf("%d endpoints, want %d", n, want)
		}
	}
	check(tr.Update(), 2+3+2+1+2)
	// Later updates build new lists; the old ones keep their names.
	old := tr.Update().Endpoints
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "multi", "multi-a", []int32{90, 80}, v1.ProtocolUDP, epSpec{ip: "10.0.1.3"}))
	check(tr.Update(), 2+2+2+1+2)
	for name, eps := range old {
		for _, ep := range eps {
			if got := *ep.(*namedEndpoint).name; got != name {
				t.Errorf("after an update, old endpoint %s listed under %v now names %v", ep, name, got)
			}
		}
	}
}

func portOf(t *testing.T, name string) int {
	t.Helper()
	n := 0
	for _, c := range name[1:] {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestFirstUpdateLarge: the first Update of many services (where the
// tracker sizes its maps for the pending changes) gives the same view as
// small ones, with and without a Filter, and later updates still apply.
func TestFirstUpdateLarge(t *testing.T) {
	for _, filtered := range []bool{false, true} {
		cfg := Config{IPFamily: v1.IPv4Protocol, NodeName: "node-1"}
		if filtered {
			cfg.Filter.IncludeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
		}
		tr := New(cfg)
		const n = 300
		for i := 0; i < n; i++ {
			name := "svc" + itoa(i)
			tr.OnServiceAdd(makeService("ns", name, []string{"172.30.1." + itoa(i%250+1)}, []int32{80}, v1.ProtocolTCP))
			net := "10.1."
			if i%2 == 1 {
				net = "10.2."
			}
			tr.OnEndpointSliceAdd(makeSlice("ns", name, name+"-a", []int32{80}, v1.ProtocolTCP, epSpec{ip: net + itoa(i/250) + "." + itoa(i%250+1)}))
		}
		u := tr.Update()
		wantSvcs, wantEps := n, n
		if filtered {
			wantSvcs, wantEps = n/2, n/2
		}
		if len(u.Services) != wantSvcs || len(u.Endpoints) != wantEps || len(u.ServicePorts) != n || u.ChangedServices.Len() != n {
			t.Fatalf("filtered=%v: %d services, %d endpoint lists, %d indexed, %d changed; want %d, %d, %d, %d",
				filtered, len(u.Services), len(u.Endpoints), len(u.ServicePorts), u.ChangedServices.Len(), wantSvcs, wantEps, n, n)
		}
		// Service 1 (odd: out of a filter's scope) gets an endpoint in scope.
		tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "svc1", "svc1-a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.9.9"}))
		u = tr.Update()
		if filtered {
			wantSvcs++
		}
		if len(u.Services) != wantSvcs || u.ChangedServices.Len() != 1 || len(u.Endpoints[spn("ns", "svc1", "p80", v1.ProtocolTCP)]) != 1 {
			t.Fatalf("filtered=%v, after an update: %d services (want %d), %d changed, endpoints %v", filtered, len(u.Services), wantSvcs, u.ChangedServices.Len(), u.Endpoints[spn("ns", "svc1", "p80", v1.ProtocolTCP)])
		}
	}
}
