package changetracker

import (
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/proxy"
)

func TestTrackerServiceAndSlice(t *testing.T) {
	var calls atomic.Int32
	var kinds []Change // handlers below run on this goroutine
	tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: "n1", OnChange: func(k Change) { calls.Add(1); kinds = append(kinds, k) }})
	if tr.Synced() {
		t.Fatal("Synced before any synced event")
	}
	tr.OnServiceAdd(makeService("ns", "a", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP))
	tr.OnEndpointSliceAdd(makeSlice("ns", "a", "a-1", []int32{8080}, v1.ProtocolTCP,
		epSpec{ip: "10.1.0.1", node: "n1"}, epSpec{ip: "10.1.0.2", node: "n2"}))
	tr.OnServiceSynced()
	tr.OnEndpointSlicesSynced()
	if !tr.Synced() {
		t.Fatal("not Synced after both synced events")
	}
	if s, e := tr.Pending(); s != 1 || e != 1 {
		t.Fatalf("Pending() = %d, %d; want 1, 1", s, e)
	}
	if calls.Load() != 4 {
		t.Errorf("OnChange called %d times, want 4", calls.Load())
	}
	if want := []Change{ServiceChange, EndpointsChange, SyncedChange, SyncedChange}; !slices.Equal(kinds, want) {
		t.Errorf("OnChange kinds = %v, want %v", kinds, want)
	}
	u := tr.Update()
	name := spn("ns", "a", "p80", v1.ProtocolTCP)
	sp := u.Services[name]
	if sp == nil || sp.ClusterIP() != netip.MustParseAddr("10.0.0.1") || sp.Port() != 80 {
		t.Fatalf("service port = %v", sp)
	}
	// The slice's port is named p8080, so it is another service port name.
	if got := endpointStrings(u.Endpoints[spn("ns", "a", "p8080", v1.ProtocolTCP)]); len(got) != 2 || got[0] != "10.1.0.1:8080" {
		t.Fatalf("endpoints = %v", got)
	}
	if !u.ChangedServices.Equal(sets.New(nn("ns", "a"))) {
		t.Errorf("ChangedServices = %v", u.ChangedServices)
	}
	if u.EndpointsResult.LocalReadyEndpoints[nn("ns", "a")] != 1 {
		t.Errorf("LocalReadyEndpoints = %v", u.EndpointsResult.LocalReadyEndpoints)
	}
	if s, e := tr.Pending(); s != 0 || e != 0 {
		t.Fatalf("Pending() after Update = %d, %d", s, e)
	}
	u = tr.Update()
	if u.ChangedServices.Len() != 0 || len(u.Services) != 1 {
		t.Errorf("second Update changed %v", u.ChangedServices)
	}
}

func TestTrackerNodeEvents(t *testing.T) {
	var calls atomic.Int32
	tr := New(Config{NodeName: "n1", OnChange: func(Change) { calls.Add(1) }})
	other := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2", Labels: map[string]string{proxy.LabelTopologyZone: "z"}}}
	tr.OnNodeAdd(other)
	if tr.NodeLabels() != nil || calls.Load() != 0 {
		t.Fatal("event for another node was recorded")
	}
	me := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{proxy.LabelTopologyZone: "z1", "x": "1"}}}
	tr.OnNodeAdd(me)
	u := tr.Update()
	if !u.NodeChanged || u.NodeLabels[proxy.LabelTopologyZone] != "z1" {
		t.Fatalf("NodeChanged=%v labels=%v", u.NodeChanged, u.NodeLabels)
	}
	if tr.Update().NodeChanged {
		t.Fatal("NodeChanged reported twice")
	}
	// A non-topology label change is not a node change.
	me2 := me.DeepCopy()
	me2.Labels["x"] = "2"
	tr.OnNodeUpdate(me, me2)
	if tr.Update().NodeChanged {
		t.Fatal("non-topology label change reported as NodeChanged")
	}
	me3 := me2.DeepCopy()
	me3.Labels[proxy.LabelTopologyZone] = "z2"
	tr.OnNodeUpdate(me2, me3)
	if u := tr.Update(); !u.NodeChanged || u.NodeLabels[proxy.LabelTopologyZone] != "z2" {
		t.Fatal("zone change not reported")
	}
	tr.OnNodeDelete(me3)
	if u := tr.Update(); !u.NodeChanged || u.NodeLabels != nil {
		t.Fatal("node delete not reported")
	}
}

func TestTrackerFilterScope(t *testing.T) {
	filter := proxy.EndpointFilter{IncludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	tr := New(Config{NodeName: "n1", Filter: filter})
	tr.OnServiceAdd(makeService("ns", "ours", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP))
	tr.OnServiceAdd(makeService("ns", "theirs", []string{"10.0.0.2"}, []int32{80}, v1.ProtocolTCP))
	tr.OnEndpointSliceAdd(makeSlice("ns", "ours", "ours-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "10.2.0.1"}))
	theirs := makeSlice("ns", "theirs", "theirs-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.2.0.2"})
	tr.OnEndpointSliceAdd(theirs)
	u := tr.Update()
	if _, ok := u.Services[spn("ns", "ours", "p80", v1.ProtocolTCP)]; !ok || len(u.Services) != 1 {
		t.Fatalf("Services = %v, want only ns/ours", u.Services)
	}
	if got := endpointStrings(u.Endpoints[spn("ns", "ours", "p80", v1.ProtocolTCP)]); len(got) != 1 || got[0] != "10.1.0.1:80" {
		t.Fatalf("filtered endpoints = %v", got)
	}
	// theirs gains an endpoint of ours: it enters scope.
	theirs2 := makeSlice("ns", "theirs", "theirs-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.2.0.2"}, epSpec{ip: "10.1.0.9"})
	tr.OnEndpointSliceUpdate(theirs, theirs2)
	u = tr.Update()
	if len(u.Services) != 2 || !u.ChangedServices.Has(nn("ns", "theirs")) {
		t.Fatalf("after entering scope: Services=%d changed=%v", len(u.Services), u.ChangedServices)
	}
	// A change to a field of an in-scope service shows in the view.
	svc := makeService("ns", "theirs", []string{"10.0.0.2"}, []int32{80}, v1.ProtocolTCP)
	svc2 := makeService("ns", "theirs", []string{"10.0.0.3"}, []int32{80}, v1.ProtocolTCP)
	tr.OnServiceUpdate(svc, svc2)
	u = tr.Update()
	if sp := u.Services[spn("ns", "theirs", "p80", v1.ProtocolTCP)]; sp == nil || sp.ClusterIP() != netip.MustParseAddr("10.0.0.3") {
		t.Fatalf("scoped view not updated: %v", sp)
	}
	// And leaves scope again when the slice goes.
	tr.OnEndpointSliceDelete(theirs2)
	u = tr.Update()
	if len(u.Services) != 1 || !u.ChangedServices.Has(nn("ns", "theirs")) {
		t.Fatalf("after leaving scope: Services=%v changed=%v", u.Services, u.ChangedServices)
	}
	// Deleting a service in scope removes it from the view.
	tr.OnServiceDelete(makeService("ns", "ours", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP))
	if u = tr.Update(); len(u.Services) != 0 {
		t.Fatalf("after delete: %v", u.Services)
	}
}

func TestTrackerSkipsHeadlessAndForeignSlices(t *testing.T) {
	tr := New(Config{ServiceProxyName: "mine"})
	s := makeSlice("ns", "a", "a-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
	tr.OnEndpointSliceAdd(s)
	tr.Update()
	headless := s.DeepCopy()
	headless.Labels[proxy.LabelHeadless] = ""
	tr.OnEndpointSliceUpdate(s, headless)
	if u := tr.Update(); len(u.Endpoints) != 0 {
		t.Fatalf("headless slice kept: %v", u.Endpoints)
	}
	foreign := s.DeepCopy()
	foreign.Labels[proxy.LabelServiceProxyName] = "other"
	tr.OnEndpointSliceAdd(foreign)
	if u := tr.Update(); len(u.Endpoints) != 0 {
		t.Fatalf("slice of another proxy kept: %v", u.Endpoints)
	}
	mine := s.DeepCopy()
	mine.Labels[proxy.LabelServiceProxyName] = "mine"
	tr.OnEndpointSliceAdd(mine)
	if u := tr.Update(); len(u.Endpoints) != 1 {
		t.Fatalf("slice of this proxy dropped: %v", u.Endpoints)
	}
}

// TestTrackerConcurrentHandlers runs handlers from many goroutines while
// the sync goroutine calls Update; run with -race.
func TestTrackerConcurrentHandlers(t *testing.T) {
	tr := New(Config{NodeName: "n1", OnChange: func(Change) {}})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				name := "s" + itoa(g) + "-" + itoa(i)
				tr.OnServiceAdd(makeService("ns", name, []string{"10.0." + itoa(g) + "." + itoa(i+1)}, []int32{80}, v1.ProtocolUDP))
				tr.OnEndpointSliceAdd(makeSlice("ns", name, name+"-1", []int32{80}, v1.ProtocolUDP, epSpec{ip: "10.1." + itoa(g) + "." + itoa(i+1)}))
				tr.OnNodeUpdate(nil, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{proxy.LabelTopologyZone: itoa(i)}}})
				tr.Pending()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		tr.Update()
	}
	u := tr.Update()
	if len(u.Services) != 200 || len(u.Endpoints) != 200 {
		t.Fatalf("got %d services, %d endpoint lists; want 200 each", len(u.Services), len(u.Endpoints))
	}
	_ = types.NamespacedName{}
}

// TestUpdateCostIsProportionalToChange counts the MakeServicePort and
// MakeEndpoint calls of an Update after one change among many services:
// only the changed service is rebuilt.
func TestUpdateCostIsProportionalToChange(t *testing.T) {
	var portCalls, endpointCalls int
	tr := New(Config{
		NodeName: "n1",
		Filter:   proxy.EndpointFilter{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}},
		MakeServicePort: func(_ *v1.ServicePort, _ *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort {
			portCalls++
			return base
		},
		MakeEndpoint: func(base *proxy.BaseEndpoint, _ *proxy.ServicePortName) proxy.Endpoint {
			endpointCalls++
			return base
		},
	})
	const n = 300
	var svcs []*v1.Service
	var eps []*discovery.EndpointSlice
	for i := 0; i < n; i++ {
		name := "s" + itoa(i)
		svc := makeService("ns", name, []string{"10.0." + itoa(i/250) + "." + itoa(1+i%250)}, []int32{80}, v1.ProtocolTCP)
		s := makeSlice("ns", name, name+"-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1." + itoa(i/250) + "." + itoa(1+i%250)}, epSpec{ip: "10.2.0.1"})
		tr.OnServiceAdd(svc)
		tr.OnEndpointSliceAdd(s)
		svcs = append(svcs, svc)
		eps = append(eps, s)
	}
	if u := tr.Update(); len(u.Services) != n {
		t.Fatalf("setup: %d services", len(u.Services))
	}
	portCalls, endpointCalls = 0, 0

	changed := eps[7].DeepCopy()
	changed.Endpoints[1].Addresses = []string{"10.2.0.2"}
	tr.OnEndpointSliceUpdate(eps[7], changed)
	svc2 := svcs[9].DeepCopy()
	svc2.Spec.Ports[0].Port = 81
	tr.OnServiceUpdate(svcs[9], svc2)
	u := tr.Update()
	if !u.ChangedServices.Equal(sets.New(nn("ns", "s7"), nn("ns", "s9"))) {
		t.Fatalf("ChangedServices = %v", u.ChangedServices)
	}
	// One port built for the new service object (plus one for its old
	// object, built when the change was recorded); two endpoints rebuilt.
	if portCalls > 2 || endpointCalls > 2 {
		t.Fatalf("one service and one slice changed, but %d ports and %d endpoints were built", portCalls, endpointCalls)
	}
	if sp := u.Services[spn("ns", "s9", "p80", v1.ProtocolTCP)]; sp == nil || sp.Port() != 81 {
		t.Fatalf("filtered view not updated: %v", sp)
	}
}

func TestHandlersDoNotSignalNoOpChanges(t *testing.T) {
	var calls int
	tr := New(Config{NodeName: "n1", OnChange: func(Change) { calls++ }})
	svc := makeService("ns", "a", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP)
	tr.OnServiceAdd(svc)
	s := makeSlice("ns", "a", "a-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
	tr.OnEndpointSliceAdd(s)
	tr.Update()
	calls = 0
	same := svc.DeepCopy()
	same.ResourceVersion = "2"
	tr.OnServiceUpdate(svc, same)
	tr.OnEndpointSliceUpdate(s, s.DeepCopy())
	tr.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	if calls != 0 {
		t.Fatalf("OnChange called %d times for no-op events", calls)
	}
	if sv, e := tr.Pending(); sv != 0 || e != 0 {
		t.Fatalf("Pending = %d, %d after no-op events", sv, e)
	}
}

// TestTrackerServicePortsIndex: Update.ServicePorts lists each service's
// current ports, following ports added and removed and services deleted,
// so engines find a changed service's ports without walking Services.
func TestTrackerServicePortsIndex(t *testing.T) {
	tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: "n1"})
	a := makeService("ns", "a", []string{"10.0.0.1"}, []int32{80, 443}, v1.ProtocolTCP)
	b := makeService("ns", "b", []string{"10.0.0.2"}, []int32{53}, v1.ProtocolUDP)
	tr.OnServiceAdd(a)
	tr.OnServiceAdd(b)
	ports := func(u Update, ns, name string) []string {
		var out []string
		for _, p := range u.ServicePorts[nn(ns, name)] {
			if _, ok := u.Services[p]; !ok {
				t.Errorf("index names %v, which is not in Services", p)
			}
			out = append(out, p.String())
		}
		slices.Sort(out)
		return out
	}
	u := tr.Update()
	if got := ports(u, "ns", "a"); !slices.Equal(got, []string{"ns/a:p443", "ns/a:p80"}) {
		t.Fatalf("ports of a = %v", got)
	}
	if got := ports(u, "ns", "b"); !slices.Equal(got, []string{"ns/b:p53"}) {
		t.Fatalf("ports of b = %v", got)
	}
	a2 := makeService("ns", "a", []string{"10.0.0.1"}, []int32{8080}, v1.ProtocolTCP)
	tr.OnServiceUpdate(a, a2)
	tr.OnServiceDelete(b)
	u = tr.Update()
	if got := ports(u, "ns", "a"); !slices.Equal(got, []string{"ns/a:p8080"}) {
		t.Fatalf("ports of a after the update = %v", got)
	}
	if _, ok := u.ServicePorts[nn("ns", "b")]; ok {
		t.Fatalf("deleted service b still indexed: %v", u.ServicePorts[nn("ns", "b")])
	}
}

// union shares a set only when asked and only when it holds the other;
// the result is always the union.
func TestUnionShares(t *testing.T) {
	n := func(s string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: s} }
	ab, a, c := sets.New(n("a"), n("b")), sets.New(n("a")), sets.New(n("c"))
	if u := union(ab, a, true); !u.Equal(ab) || !sameSet(u, ab) {
		t.Errorf("union(ab, a) = %v, want ab itself", u)
	}
	if u := union(a, ab, true); !u.Equal(ab) || !sameSet(u, ab) {
		t.Errorf("union(a, ab) = %v, want ab itself", u)
	}
	if u := union(ab, a, false); !u.Equal(ab) || sameSet(u, ab) {
		t.Errorf("union(ab, a) without sharing = %v, want a copy", u)
	}
	if u := union(a, c, true); !u.Equal(sets.New(n("a"), n("c"))) || sameSet(u, a) || sameSet(u, c) {
		t.Errorf("union(a, c) = %v, want a new {a, c}", u)
	}
	if u := union(nil, nil, true); len(u) != 0 {
		t.Errorf("union of nothing = %v", u)
	}
}

func sameSet(a, b sets.Set[types.NamespacedName]) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
