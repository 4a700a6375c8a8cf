package winkernel_test

import (
	"context"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// world is a set of objects over the conformance topology, covering every
// kind of HNS load balancer the engine makes.
func world(topo proxytest.Topology) proxytest.Objects {
	a1, a2, b1 := topo.LocalPods[0], topo.LocalPods[1], topo.RemotePods[0]
	http := []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}
	httpSlice := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	ready := func(pods ...proxytest.Pod) []proxytest.EndpointSpec {
		var out []proxytest.EndpointSpec
		for _, p := range pods {
			out = append(out, proxytest.EndpointSpec{Pod: p})
		}
		return out
	}
	lb := func(ip netip.Addr, local bool) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.Ports[0].NodePort = 30080
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip.String()}}
			if local {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.Ports[0].NodePort = 30081
			}
		}
	}
	return proxytest.Objects{
		Services: []*v1.Service{
			proxytest.MakeService(topo, "web", topo.ServiceIP(1), http, nil),
			proxytest.MakeService(topo, "sticky", topo.ServiceIP(2), http, func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.ExternalIPs = []string{topo.ExternalIP(1).String()}
			}),
			proxytest.MakeService(topo, "lb", topo.ServiceIP(3), http, lb(topo.LoadBalancerIP(1), false)),
			proxytest.MakeService(topo, "lb-local", topo.ServiceIP(4), http, lb(topo.LoadBalancerIP(2), true)),
			proxytest.MakeService(topo, "itp-local", topo.ServiceIP(5), http, func(s *v1.Service) {
				p := v1.ServiceInternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = &p
			}),
			proxytest.MakeService(topo, "dns", topo.ServiceIP(6), []proxytest.ServicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, TargetPort: 5353}}, nil),
			proxytest.MakeService(topo, "preserve", topo.ServiceIP(7), http, func(s *v1.Service) {
				lb(topo.LoadBalancerIP(3), false)(s)
				s.Spec.Ports[0].NodePort = 30082
				s.Annotations = map[string]string{winkernel.AnnotationPreserveDestination: "true"}
			}),
			proxytest.MakeService(topo, "empty", topo.ServiceIP(8), http, nil),
		},
		EndpointSlices: []*discovery.EndpointSlice{
			proxytest.MakeSlice(topo, "web", "1", httpSlice, ready(a1, b1)...),
			proxytest.MakeSlice(topo, "sticky", "1", httpSlice, ready(a2, b1)...),
			proxytest.MakeSlice(topo, "lb", "1", httpSlice, ready(a1, a2, b1)...),
			proxytest.MakeSlice(topo, "lb-local", "1", httpSlice, ready(a1, b1)...),
			proxytest.MakeSlice(topo, "itp-local", "1", httpSlice, ready(a2, b1)...),
			proxytest.MakeSlice(topo, "dns", "1", []proxytest.SlicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: 5353}}, ready(a1, b1)...),
			proxytest.MakeSlice(topo, "preserve", "1", httpSlice, ready(a1, b1)...),
		},
	}
}

// syncTo feeds objs (the whole state) and syncs.
func syncTo(t testing.TB, feeder *proxytest.Feeder, p *winkernel.Proxier, objs proxytest.Objects) error {
	t.Helper()
	if err := feeder.Apply(objs); err != nil {
		t.Fatal(err)
	}
	feeder.Synced()
	return p.Sync(context.Background())
}

func mustSync(t testing.TB, feeder *proxytest.Feeder, p *winkernel.Proxier, objs proxytest.Objects) {
	t.Helper()
	if err := syncTo(t, feeder, p, objs); err != nil {
		t.Fatal(err)
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family v1.IPFamily
		typ    winkernel.NetworkType
		dsr    bool
	}{
		{"overlay.golden", v1.IPv4Protocol, winkernel.NetworkOverlay, false},
		{"overlay-dsr-ipv6.golden", v1.IPv6Protocol, winkernel.NetworkOverlay, true},
		{"l2bridge.golden", v1.IPv4Protocol, winkernel.NetworkL2Bridge, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := proxytest.DefaultTopology(tc.family)
			f := newTopoFakes(topo, tc.typ)
			p := newTopoProxier(t, topo, f, func(c *winkernel.Config) {
				c.EnableDSR = tc.dsr
				if !tc.typ.IsOverlay() {
					c.SourceVIP = netip.Addr{}
				}
			})
			mustSync(t, proxytest.NewFeeder(p), p, world(topo))
			golden(t, tc.name, f.Dump())
			dry, err := p.DryRun(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			golden(t, strings.TrimSuffix(tc.name, ".golden")+"-dryrun.golden", dry)
		})
	}
}

// writes counts the HNS calls that change something.
func writes(f *winkerneltest.Fakes) int {
	return f.HNS.CallsOf("CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer", "CreateEndpoint", "DeleteEndpoint")
}

func TestRestartOverCorrectStateWritesNothing(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	before := f.Dump()

	f.HNS.ResetCalls()
	p2 := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p2), p2, world(topo))
	if n := writes(f); n != 0 {
		t.Errorf("a restart over a correct HNS state made %d writes: %v", n, f.HNS.Calls())
	}
	if after := f.Dump(); after != before {
		t.Errorf("state changed:\n%s\nwant\n%s", after, before)
	}
	// A periodic sync with no change makes no HNS call at all.
	f.HNS.ResetCalls()
	if err := p2.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := f.HNS.Calls(); len(c) != 0 {
		t.Errorf("a partial sync with nothing changed called HNS: %v", c)
	}
}

func TestOutOfBandDeleteIsRecreated(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	want := f.Dump()
	lbs := f.HNS.LoadBalancers()
	f.HNS.DeleteOutOfBand(lbs[0].ID)
	f.HNS.DeleteOutOfBand(lbs[3].ID)
	f.HNS.ResetCalls()

	p.RequestFullSync() // what the drift check does; see TestDriftCheck
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.Dump(); got != want {
		t.Errorf("after an out-of-band delete and a full sync:\n%s\nwant\n%s", got, want)
	}
	if n := f.HNS.CallsOf("CreateLoadBalancer"); n != 2 {
		t.Errorf("%d creates, want 2", n)
	}
}

func TestStartupAdoptsOursAndKeepsForeign(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	// Another network with its own endpoint and LB (another proxy's).
	f.HNS.AddNetwork(winkernel.Network{Name: "other", Type: winkernel.NetworkL2Bridge})
	otherEP, _ := f.HNS.AddLocalEndpoint("other", "x", netip.MustParseAddr("172.16.0.2"))
	foreign := f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("172.17.0.10")}, SourceVIP: netip.MustParseAddr("172.16.0.1"),
		Protocol: winkernel.ProtocolTCP, InternalPort: 80, ExternalPort: 80, EndpointIDs: []string{otherEP},
	})
	// A foreign LB with our source VIP but an endpoint of the other network.
	foreign2 := f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("172.17.0.11")}, SourceVIP: sourceVIP(topo),
		Protocol: winkernel.ProtocolTCP, InternalPort: 80, ExternalPort: 80, EndpointIDs: []string{otherEP},
	})
	// A stale LB of ours from an earlier run: our source VIP, a local pod.
	var a1 string
	for _, ep := range f.HNS.Endpoints() {
		if ep.IP == topo.LocalPods[0].IP {
			a1 = ep.ID
		}
	}
	stale := f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{topo.ServiceIP(99)}, SourceVIP: sourceVIP(topo),
		Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80, EndpointIDs: []string{a1},
	})
	// An LB holding the address of one of our services, with wrong backends.
	held := f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{topo.ServiceIP(1)}, SourceVIP: netip.MustParseAddr("10.244.1.251"),
		Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80, EndpointIDs: []string{a1},
	})

	p := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	ids := map[string]bool{}
	for _, lb := range f.HNS.LoadBalancers() {
		ids[lb.ID] = true
	}
	if !ids[foreign] || !ids[foreign2] {
		t.Errorf("a foreign load balancer was deleted:\n%s", f.Dump())
	}
	if ids[stale] {
		t.Errorf("a stale load balancer of ours was kept:\n%s", f.Dump())
	}
	if !ids[held] {
		t.Errorf("the load balancer holding our service's address was not adopted (updated in place)")
	}

	// The same state as a fresh host, the foreign LBs aside.
	clean := newTopoFakes(topo, winkernel.NetworkOverlay)
	pc := newTopoProxier(t, topo, clean, nil)
	mustSync(t, proxytest.NewFeeder(pc), pc, world(topo))
	if got, want := withoutLines(f.Dump(), "172.1"), clean.Dump(); got != want {
		t.Errorf("after adoption:\n%s\nwant\n%s", got, want)
	}
}

func withoutLines(s, substr string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.Contains(l, substr) && !strings.HasPrefix(l, "network other") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func TestFailedDeleteIsRetried(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)

	fewer := objs
	fewer.Services = objs.Services[1:] // "web" goes
	boom := errors.New("HNS is busy")
	f.HNS.FailOn("DeleteLoadBalancer", 1, boom)
	if err := syncTo(t, feeder, p, fewer); !errors.Is(err, boom) {
		t.Fatalf("Sync: %v, want the delete's error", err)
	}
	if !strings.Contains(f.Dump(), "lb "+topo.ServiceIP(1).String()+":80/tcp") {
		t.Fatalf("the LB whose delete failed is gone already:\n%s", f.Dump())
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(f.Dump(), "lb "+topo.ServiceIP(1).String()+":80/tcp") {
		t.Errorf("the next sync did not retry the delete:\n%s", f.Dump())
	}
}

func TestLeakedDeleteConverges(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	noUpdate := winkernel.Features{DSR: true, SessionAffinity: true, RemoteSubnet: true} // no in-place update
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	f.SetFeatures(noUpdate)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)

	// "web" loses its remote endpoint: delete + create, and the delete leaks.
	changed := objs
	changed.EndpointSlices = append([]*discovery.EndpointSlice{}, objs.EndpointSlices...)
	changed.EndpointSlices[0] = proxytest.MakeSlice(topo, "web", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}, proxytest.EndpointSpec{Pod: topo.LocalPods[0]})
	f.HNS.LeakDeletes(1)
	err := syncTo(t, feeder, p, changed)
	if !errors.Is(err, winkernel.ErrPortAlreadyExists) {
		t.Fatalf("Sync: %v, want port-already-exists from the create after the leaked delete", err)
	}
	for i := 0; i < 3 && err != nil; i++ {
		err = p.Sync(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	clean := newTopoFakes(topo, winkernel.NetworkOverlay)
	clean.SetFeatures(noUpdate) // (Dump shows the features)
	pc := newTopoProxier(t, topo, clean, nil)
	mustSync(t, proxytest.NewFeeder(pc), pc, changed)
	if got, want := f.Dump(), clean.Dump(); got != want {
		t.Errorf("after a leaked delete:\n%s\nwant\n%s", got, want)
	}
}

func TestUpdateNotImplementedFallsBack(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)

	f.HNS.FailOn("UpdateLoadBalancer", -1, winkernel.ErrNotImplemented)
	f.HNS.ResetCalls()
	changed := objs
	changed.EndpointSlices = append([]*discovery.EndpointSlice{}, objs.EndpointSlices...)
	changed.EndpointSlices[0] = proxytest.MakeSlice(topo, "web", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}, proxytest.EndpointSpec{Pod: topo.LocalPods[1]})
	mustSync(t, feeder, p, changed)
	if u, d, c := f.HNS.CallsOf("UpdateLoadBalancer"), f.HNS.CallsOf("DeleteLoadBalancer"), f.HNS.CallsOf("CreateLoadBalancer"); u != 1 || d != 1 || c != 1 {
		t.Errorf("update/delete/create calls %d/%d/%d, want 1/1/1", u, d, c)
	}
	f.HNS.ResetCalls()
	changed.EndpointSlices[0] = proxytest.MakeSlice(topo, "web", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}, proxytest.EndpointSpec{Pod: topo.LocalPods[0]})
	mustSync(t, feeder, p, changed)
	if u := f.HNS.CallsOf("UpdateLoadBalancer"); u != 0 {
		t.Errorf("updates tried again after not-implemented: %d", u)
	}
}

func TestRemoteEndpointsShared(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)
	remote := "endpoint " + topo.RemotePods[0].IP.String() + " remote"
	locals := strings.Count(f.Dump(), " local")

	// Every service but "web" goes: b1 stays, web still uses it.
	one := proxytest.Objects{Services: objs.Services[:1], EndpointSlices: objs.EndpointSlices[:1]}
	mustSync(t, feeder, p, one)
	if !strings.Contains(f.Dump(), remote) {
		t.Fatalf("the remote endpoint went while a service uses it:\n%s", f.Dump())
	}
	mustSync(t, feeder, p, proxytest.Objects{})
	if d := f.Dump(); strings.Contains(d, remote) || strings.Contains(d, "lb ") {
		t.Errorf("left behind with no services:\n%s", d)
	}
	if got := strings.Count(f.Dump(), " local"); got != locals {
		t.Errorf("local endpoints %d, want %d (never deleted)", got, locals)
	}
}

func TestCleanup(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	mustSync(t, proxytest.NewFeeder(p), p, world(topo))
	f.HNS.AddNetwork(winkernel.Network{Name: "other", Type: winkernel.NetworkL2Bridge})
	otherEP, _ := f.HNS.AddLocalEndpoint("other", "x", netip.MustParseAddr("172.16.0.2"))
	foreign := f.HNS.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("172.17.0.10")}, SourceVIP: netip.MustParseAddr("172.16.0.1"),
		Protocol: winkernel.ProtocolTCP, InternalPort: 80, ExternalPort: 80, EndpointIDs: []string{otherEP},
	})
	// A fresh process (as `--cleanup` is) finds ours by the ownership rule.
	p2 := newTopoProxier(t, topo, f, nil)
	if err := p2.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	lbs := f.HNS.LoadBalancers()
	if len(lbs) != 1 || lbs[0].ID != foreign {
		t.Errorf("after cleanup:\n%s\nwant only the foreign LB", f.Dump())
	}
	for _, ep := range f.HNS.Endpoints() {
		if ep.Remote {
			t.Errorf("remote endpoint %s left after cleanup", ep.IP)
		}
	}
}

func TestPartialSyncWritesOnlyTheChange(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)
	f.HNS.ResetCalls()
	changed := objs
	changed.EndpointSlices = append([]*discovery.EndpointSlice{}, objs.EndpointSlices...)
	changed.EndpointSlices[1] = proxytest.MakeSlice(topo, "sticky", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}, proxytest.EndpointSpec{Pod: topo.LocalPods[1]})
	mustSync(t, feeder, p, changed)
	// "sticky" has a cluster-IP and an external-IP LB: two updates; b1 is
	// still used by others. No listing: nothing unknown was needed.
	if c := f.HNS.Calls(); len(c) != 1 || c["UpdateLoadBalancer"] != 2 {
		t.Errorf("calls %v, want 2 updates only", c)
	}
}

// A pod the CNI created after the last listing is found by listing the
// endpoints again, once, in the partial sync that needs it.
func TestNewLocalPodFoundByRelisting(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	p := newTopoProxier(t, topo, f, nil)
	feeder := proxytest.NewFeeder(p)
	objs := world(topo)
	mustSync(t, feeder, p, objs)

	newPod := proxytest.Pod{Name: "pod-a9", IP: netip.MustParseAddr("10.244.1.77"), Node: topo.NodeName, Zone: topo.Zone}
	f.AddPod(newPod.Name, newPod.IP)
	changed := objs
	changed.EndpointSlices = append([]*discovery.EndpointSlice{}, objs.EndpointSlices...)
	changed.EndpointSlices[0] = proxytest.MakeSlice(topo, "web", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}},
		proxytest.EndpointSpec{Pod: topo.LocalPods[0]}, proxytest.EndpointSpec{Pod: newPod})
	f.HNS.ResetCalls()
	mustSync(t, feeder, p, changed)
	if n := f.HNS.CallsOf("ListEndpoints"); n != 1 {
		t.Errorf("%d endpoint listings, want 1", n)
	}
	if !strings.Contains(f.Dump(), "lb 10.96.0.1:80/tcp -> 10.244.1.2:8080 10.244.1.77:8080 ") {
		t.Errorf("the new pod is not a backend:\n%s", f.Dump())
	}
}

// TestRestartOverDumpedState: a fake seeded from the text of the golden
// states (winkerneltest.NewFakesFromDump) is an HNS a previous run left
// right: a new proxier adopts it with no write and the same dump.
func TestRestartOverDumpedState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		family v1.IPFamily
		dsr    bool
	}{
		{"overlay.golden", v1.IPv4Protocol, false},
		{"overlay-dsr-ipv6.golden", v1.IPv6Protocol, true},
		{"l2bridge.golden", v1.IPv4Protocol, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tc.name))
			if err != nil {
				t.Fatal(err)
			}
			f, err := winkerneltest.NewFakesFromDump(tc.family, string(data))
			if err != nil {
				t.Fatal(err)
			}
			topo := proxytest.DefaultTopology(tc.family)
			p := newTopoProxier(t, topo, f, func(c *winkernel.Config) {
				c.EnableDSR = tc.dsr
				if strings.HasPrefix(tc.name, "l2bridge") {
					c.SourceVIP = netip.Addr{}
				}
			})
			mustSync(t, proxytest.NewFeeder(p), p, world(topo))
			if n := writes(f); n != 0 {
				t.Errorf("%d writes over a dumped correct state: %v", n, f.HNS.Calls())
			}
			if got := f.Dump(); got != string(data) {
				t.Errorf("state changed:\n%s\nwant\n%s", got, data)
			}
		})
	}
}
