package changetracker

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

func newEPTracker(family v1.IPFamily, filter proxy.EndpointFilter) *EndpointsChangeTracker {
	return NewEndpointsChangeTracker(EndpointsTrackerConfig{IPFamily: family, NodeName: "node-1", Filter: filter})
}

func TestEndpointSliceUpdateReportsOnlyRealChanges(t *testing.T) {
	tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
	m := make(EndpointsMap)
	s1 := makeSlice("ns", "svc", "svc-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
	if !tr.EndpointSliceUpdate(s1, false) {
		t.Fatal("new slice: no change")
	}
	if tr.EndpointSliceUpdate(s1.DeepCopy(), false) {
		t.Fatal("same slice twice: change")
	}
	m.Update(tr)
	if tr.EndpointSliceUpdate(s1.DeepCopy(), false) {
		t.Fatal("applied slice again: change")
	}
	// Fields the proxy does not use are no change.
	relabelled := s1.DeepCopy()
	relabelled.ResourceVersion = "7"
	relabelled.Endpoints[0].TargetRef = &v1.ObjectReference{Name: "pod"}
	if tr.EndpointSliceUpdate(relabelled, false) {
		t.Fatal("unused fields changed: change")
	}
	// Reordered endpoints are no change.
	two := makeSlice("ns", "svc", "svc-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "10.1.0.2"})
	if !tr.EndpointSliceUpdate(two, false) {
		t.Fatal("added endpoint: no change")
	}
	m.Update(tr)
	reordered := makeSlice("ns", "svc", "svc-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.2"}, epSpec{ip: "10.1.0.1"})
	if tr.EndpointSliceUpdate(reordered, false) {
		t.Fatal("reordered endpoints: change")
	}
	// A change and its undo before a sync: the undo reports the change
	// of pending state, and nothing is left to apply.
	three := makeSlice("ns", "svc", "svc-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "10.1.0.3"})
	if !tr.EndpointSliceUpdate(three, false) || !tr.EndpointSliceUpdate(two, false) {
		t.Fatal("change + undo not reported")
	}
	if tr.Pending() != 0 {
		t.Fatalf("Pending = %d after undo", tr.Pending())
	}
	if res := m.Update(tr); res.UpdatedServices.Len() != 0 {
		t.Fatalf("undo applied as a change: %v", res.UpdatedServices)
	}
	// Deleting an unknown slice is no change; add + delete before a sync is
	// a change of pending state that leaves nothing.
	if tr.EndpointSliceUpdate(makeSlice("ns", "svc", "nope", []int32{80}, v1.ProtocolTCP), true) {
		t.Fatal("delete of unknown slice: change")
	}
	s9 := makeSlice("ns", "other", "other-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.9"})
	tr.EndpointSliceUpdate(s9, false)
	tr.EndpointSliceUpdate(s9, true)
	if tr.Pending() != 0 || len(tr.services) != 1 {
		t.Fatalf("add+delete left state: pending %d, services %d", tr.Pending(), len(tr.services))
	}
}

func TestEndpointSlicesIgnored(t *testing.T) {
	tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
	noLabel := makeSlice("ns", "svc", "svc-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
	delete(noLabel.Labels, discovery.LabelServiceName)
	if tr.EndpointSliceUpdate(noLabel, false) {
		t.Error("slice without service-name label recorded")
	}
	v6 := makeSlice("ns", "svc", "svc-2", []int32{80}, v1.ProtocolTCP, epSpec{ip: "fd00::1"})
	if tr.EndpointSliceUpdate(v6, false) {
		t.Error("IPv6 slice recorded by the IPv4 tracker")
	}
	fqdn := makeSlice("ns", "svc", "svc-3", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
	fqdn.AddressType = discovery.AddressTypeFQDN
	if tr.EndpointSliceUpdate(fqdn, false) {
		t.Error("FQDN slice recorded")
	}
	if tr.EndpointSliceUpdate(nil, false) {
		t.Error("nil slice recorded")
	}
}

func TestEndpointsMapBuilding(t *testing.T) {
	ten := netip.MustParsePrefix("10.0.0.0/8")
	tests := []struct {
		name    string
		family  v1.IPFamily
		filter  proxy.EndpointFilter
		slices  []*discovery.EndpointSlice
		want    map[proxy.ServicePortName][]string
		skipped int
	}{{
		name:   "endpoints of all slices are merged, sorted by address",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "b", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.9"}, epSpec{ip: "10.1.0.10"}),
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.2"}),
		},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"10.1.0.2:80", "10.1.0.9:80", "10.1.0.10:80"}},
	}, {
		name:   "the same ip:port in two slices is kept once",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}),
			makeSlice("ns", "svc", "b", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}),
		},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"10.1.0.1:80"}},
	}, {
		name:   "each port gets its own list",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "a", []int32{80, 53}, v1.ProtocolUDP, epSpec{ip: "10.1.0.1"}),
		},
		want: map[proxy.ServicePortName][]string{
			spn("ns", "svc", "p80", v1.ProtocolUDP): {"10.1.0.1:80"},
			spn("ns", "svc", "p53", v1.ProtocolUDP): {"10.1.0.1:53"},
		},
	}, {
		name:   "IPv6 endpoints in the IPv6 tracker",
		family: v1.IPv6Protocol,
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "fd00::2"}, epSpec{ip: "fd00::1"}),
		},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"[fd00::1]:80", "[fd00::2]:80"}},
	}, {
		name:   "addresses of the other family are ignored",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{
			// A hand-made slice that lies about its address type.
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "fd00::1"}),
		},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"10.1.0.1:80"}},
	}, {
		name:   "unparsable addresses and ports without a number are skipped",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{func() *discovery.EndpointSlice {
			s := makeSlice("ns", "svc", "a", []int32{80, 81}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "bogus"})
			s.Ports[1].Port = nil
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{}) // no address
			return s
		}()},
		want:    map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"10.1.0.1:80"}},
		skipped: 2,
	}, {
		name:   "the filter's include and exclude CIDRs apply",
		family: v1.IPv4Protocol,
		filter: proxy.EndpointFilter{IncludeCIDRs: []netip.Prefix{ten}, ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}},
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}, epSpec{ip: "10.9.0.1"}, epSpec{ip: "192.168.0.1"}),
		},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "p80", v1.ProtocolTCP): {"10.1.0.1:80"}},
	}, {
		name:   "a service with no endpoints left has no entry",
		family: v1.IPv4Protocol,
		filter: proxy.EndpointFilter{ExcludeCIDRs: []netip.Prefix{ten}},
		slices: []*discovery.EndpointSlice{
			makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}),
		},
		want: map[proxy.ServicePortName][]string{},
	}, {
		name:   "unset port name and protocol default to empty and TCP",
		family: v1.IPv4Protocol,
		slices: []*discovery.EndpointSlice{func() *discovery.EndpointSlice {
			s := makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"})
			s.Ports[0].Name, s.Ports[0].Protocol = nil, nil
			return s
		}()},
		want: map[proxy.ServicePortName][]string{spn("ns", "svc", "", v1.ProtocolTCP): {"10.1.0.1:80"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newEPTracker(tc.family, tc.filter)
			for _, s := range tc.slices {
				tr.EndpointSliceUpdate(s, false)
			}
			if want := uint64(tc.skipped); tr.Skipped() != want {
				t.Errorf("Skipped() = %d, want %d", tr.Skipped(), want)
			}
			m := make(EndpointsMap)
			m.Update(tr)
			if len(m) != len(tc.want) {
				t.Fatalf("got %v, want %v", m, tc.want)
			}
			for name, want := range tc.want {
				if got := endpointStrings(m[name]); !slices.Equal(got, want) {
					t.Errorf("%v: got %v, want %v", name, got, want)
				}
			}
		})
	}
}

func TestEndpointConditionsAndDedupPreference(t *testing.T) {
	tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
	s := makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP,
		epSpec{ip: "10.1.0.1", node: "node-1", zone: "z1", zoneHints: []string{"z1"}, nodeHints: []string{"node-1"}},
		epSpec{ip: "10.1.0.2", notReady: true},                                           // serving unset: same as ready
		epSpec{ip: "10.1.0.3", notReady: true, terminating: true, serving: ptr.To(true)}, // serving terminating
		epSpec{ip: "10.1.0.4", notReady: true, node: "node-2"},                           // not ready in slice a ...
	)
	s.Endpoints[0].Conditions.Ready = nil                                                                   // unset ready counts as ready
	dup := makeSlice("ns", "svc", "b", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.4", node: "node-2"}) // ... ready in b
	tr.EndpointSliceUpdate(s, false)
	tr.EndpointSliceUpdate(dup, false)
	m := make(EndpointsMap)
	m.Update(tr)
	eps := m[spn("ns", "svc", "p80", v1.ProtocolTCP)]
	if len(eps) != 4 {
		t.Fatalf("endpoints = %v", eps)
	}
	e1, e2, e3, e4 := eps[0], eps[1], eps[2], eps[3]
	if !e1.IsReady() || !e1.IsServing() || !e1.IsLocal() || e1.NodeName() != "node-1" || e1.Zone() != "z1" ||
		!e1.ZoneHints().Equal(sets.New("z1")) || !e1.NodeHints().Equal(sets.New("node-1")) {
		t.Errorf("endpoint 1 = %+v", e1)
	}
	if e2.IsReady() || e2.IsServing() || e2.IsTerminating() || e2.IsLocal() || e2.ZoneHints() != nil {
		t.Errorf("endpoint 2 = %+v", e2)
	}
	if e3.IsReady() || !e3.IsServing() || !e3.IsTerminating() {
		t.Errorf("endpoint 3 = %+v", e3)
	}
	if !e4.IsReady() {
		t.Errorf("duplicate endpoint 4: the ready copy should win, got %+v", e4)
	}
}

func TestEndpointsMapUpdateResult(t *testing.T) {
	tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
	m := make(EndpointsMap)
	dns := spn("ns", "dns", "p53", v1.ProtocolUDP)

	// No endpoints -> some: newly active.
	s1 := makeSlice("ns", "dns", "dns-1", []int32{53}, v1.ProtocolUDP, epSpec{ip: "10.1.0.1", node: "node-1"}, epSpec{ip: "10.1.0.2"})
	tr.EndpointSliceUpdate(s1, false)
	res := m.Update(tr)
	if !slices.Equal(res.NewlyActiveUDPServices, []proxy.ServicePortName{dns}) || len(res.DeletedUDPEndpoints) != 0 {
		t.Fatalf("add result = %+v", res)
	}
	if res.LocalReadyEndpoints[nn("ns", "dns")] != 1 {
		t.Fatalf("LocalReadyEndpoints = %v", res.LocalReadyEndpoints)
	}

	// One endpoint removed, one no longer ready (and not serving): both stale.
	s2 := makeSlice("ns", "dns", "dns-1", []int32{53}, v1.ProtocolUDP, epSpec{ip: "10.1.0.1", node: "node-1", notReady: true})
	tr.EndpointSliceUpdate(s2, false)
	res = m.Update(tr)
	want := []proxy.ServiceEndpoint{{Endpoint: "10.1.0.1:53", ServicePortName: dns}, {Endpoint: "10.1.0.2:53", ServicePortName: dns}}
	if !slices.Equal(res.DeletedUDPEndpoints, want) || len(res.NewlyActiveUDPServices) != 0 {
		t.Fatalf("removal result = %+v", res)
	}
	if n, ok := res.LocalReadyEndpoints[nn("ns", "dns")]; !ok || n != 0 {
		t.Fatalf("LocalReadyEndpoints should report 0 for the updated service: %v", res.LocalReadyEndpoints)
	}

	// Back to ready: newly active again. Then terminating but serving: kept.
	s3 := makeSlice("ns", "dns", "dns-1", []int32{53}, v1.ProtocolUDP, epSpec{ip: "10.1.0.1", node: "node-1"})
	tr.EndpointSliceUpdate(s3, false)
	if res = m.Update(tr); len(res.NewlyActiveUDPServices) != 1 {
		t.Fatalf("re-activation result = %+v", res)
	}
	s4 := makeSlice("ns", "dns", "dns-1", []int32{53}, v1.ProtocolUDP, epSpec{ip: "10.1.0.1", node: "node-1", notReady: true, terminating: true, serving: ptr.To(true)})
	tr.EndpointSliceUpdate(s4, false)
	if res = m.Update(tr); len(res.DeletedUDPEndpoints) != 0 || !res.UpdatedServices.Has(nn("ns", "dns")) {
		t.Fatalf("terminating-but-serving result = %+v", res)
	}

	// TCP endpoints never need conntrack cleaning.
	web := makeSlice("ns", "web", "web-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.5"})
	tr.EndpointSliceUpdate(web, false)
	m.Update(tr)
	tr.EndpointSliceUpdate(web, true)
	if res = m.Update(tr); len(res.DeletedUDPEndpoints) != 0 || !res.UpdatedServices.Has(nn("ns", "web")) {
		t.Fatalf("TCP removal result = %+v", res)
	}
	if _, ok := m[spn("ns", "web", "p80", v1.ProtocolTCP)]; ok {
		t.Fatal("deleted slice's endpoints still in the map")
	}
	if got := m.LocalReadyEndpoints(); len(got) != 0 {
		t.Fatalf("LocalReadyEndpoints() = %v (terminating endpoints do not count)", got)
	}
}

func TestMakeEndpointWraps(t *testing.T) {
	type wrapped struct {
		*proxy.BaseEndpoint
		chain string
	}
	tr := NewEndpointsChangeTracker(EndpointsTrackerConfig{
		IPFamily: v1.IPv4Protocol,
		MakeEndpoint: func(base *proxy.BaseEndpoint, name *proxy.ServicePortName) proxy.Endpoint {
			return &wrapped{base, "SEP-" + name.String() + "-" + base.String()}
		},
	})
	tr.EndpointSliceUpdate(makeSlice("ns", "s", "s-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}), false)
	m := make(EndpointsMap)
	m.Update(tr)
	w, ok := m[spn("ns", "s", "p80", v1.ProtocolTCP)][0].(*wrapped)
	if !ok || w.chain != "SEP-ns/s:p80-10.1.0.1:80" {
		t.Fatalf("wrapped endpoint = %#v", m)
	}
}

func TestLastChangeTriggerTimes(t *testing.T) {
	tr := NewEndpointsChangeTracker(EndpointsTrackerConfig{IPFamily: v1.IPv4Protocol, NodeName: "n1"})
	m := make(EndpointsMap)
	at := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	withTrigger := func(s *discovery.EndpointSlice, when time.Time) *discovery.EndpointSlice {
		s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: when.Format(time.RFC3339Nano)}
		return s
	}
	old := withTrigger(makeSlice("ns", "a", "a-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.1"}), at.Add(-time.Hour))
	tr.EndpointSliceUpdate(old, false)
	tr.EndpointSliceUpdate(withTrigger(makeSlice("ns", "b", "b-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.2"}), at), false)
	res := m.Update(tr)
	nn := types.NamespacedName{Namespace: "ns", Name: "b"}
	if got := res.LastChangeTriggerTimes; len(got) != 1 || len(got[nn]) != 1 || !got[nn][0].Equal(at) {
		t.Fatalf("LastChangeTriggerTimes = %v, want only %v for ns/b (a's time is before the tracker started)", got, at)
	}
	// A change that is undone before the sync reports no time.
	changed := withTrigger(makeSlice("ns", "b", "b-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.3"}), at.Add(time.Second))
	tr.EndpointSliceUpdate(changed, false)
	tr.EndpointSliceUpdate(withTrigger(makeSlice("ns", "b", "b-1", []int32{80}, v1.ProtocolTCP, epSpec{ip: "10.1.0.2"}), at.Add(2*time.Second)), false)
	if res := m.Update(tr); len(res.LastChangeTriggerTimes) != 0 {
		t.Fatalf("an undone change reported trigger times %v", res.LastChangeTriggerTimes)
	}
}

// Pod-IP reuse, as kube-proxy v1.37 (kubernetes#135593): a terminating pod's
// IP handed to a new pod that is not ready yet. The endpoint is the new
// pod's (not ready, not serving, not terminating), whichever slice lists
// which copy and in whichever order the slices arrive; on v1.34 (and on
// this module before) the old pod's serving copy won and kept its traffic.
func TestPodIPReusePrefersNonTerminating(t *testing.T) {
	old := epSpec{ip: "10.1.0.7", node: "node-1", notReady: true, terminating: true, serving: ptr.To(true)}
	reused := epSpec{ip: "10.1.0.7", node: "node-1", notReady: true}
	check := func(t *testing.T, slices ...*discovery.EndpointSlice) {
		t.Helper()
		tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
		for _, s := range slices {
			tr.EndpointSliceUpdate(s, false)
		}
		m := make(EndpointsMap)
		m.Update(tr)
		eps := m[spn("ns", "svc", "p80", v1.ProtocolTCP)]
		if len(eps) != 1 {
			t.Fatalf("endpoints = %v, want one", eps)
		}
		if e := eps[0]; e.IsTerminating() || e.IsServing() || e.IsReady() {
			t.Errorf("endpoint = %+v: want the new pod's copy (not terminating, not serving)", e)
		}
	}
	t.Run("one-slice", func(t *testing.T) {
		check(t, makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, old, reused))
		check(t, makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, reused, old))
	})
	t.Run("two-slices", func(t *testing.T) {
		a := makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, old)
		b := makeSlice("ns", "svc", "b", []int32{80}, v1.ProtocolTCP, reused)
		check(t, a, b)
		check(t, b, a)
		a2 := makeSlice("ns", "svc", "a", []int32{80}, v1.ProtocolTCP, reused)
		b2 := makeSlice("ns", "svc", "b", []int32{80}, v1.ProtocolTCP, old)
		check(t, a2, b2)
	})
}

// A deleted UDP service port is reported with its frontends, for the
// conntrack cleanup of kube-proxy v1.38 (kubernetes#141371).
func TestDeletedUDPServicePorts(t *testing.T) {
	tr := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: v1.IPv4Protocol})
	m := make(ServicePortMap)
	both := makeService("ns", "dns", []string{"172.30.0.10"}, []int32{53, 54}, v1.ProtocolUDP, func(s *v1.Service) {
		s.Spec.ExternalIPs = []string{"192.0.2.5"}
	})
	tcp := makeService("ns", "web", []string{"172.30.0.11"}, []int32{80}, v1.ProtocolTCP)
	tr.Update(nil, both)
	tr.Update(nil, tcp)
	m.Update(tr)
	one := both.DeepCopy()
	one.Spec.Ports = one.Spec.Ports[:1]
	tr.Update(both, one)
	tr.Update(tcp, nil)
	res := m.Update(tr)
	if len(res.DeletedUDPServicePorts) != 1 {
		t.Fatalf("DeletedUDPServicePorts = %v, want the dropped port 54 only", res.DeletedUDPServicePorts)
	}
	p := res.DeletedUDPServicePorts[0]
	if p.Port() != 54 || p.ClusterIP().String() != "172.30.0.10" || len(p.ExternalIPs()) != 1 {
		t.Errorf("deleted port = %v (external IPs %v)", p, p.ExternalIPs())
	}
	if res.DeletedUDPClusterIPs.Len() != 0 {
		t.Errorf("DeletedUDPClusterIPs = %v: the cluster IP still serves port 53", res.DeletedUDPClusterIPs)
	}
	tr.Update(one, nil)
	res = m.Update(tr)
	if len(res.DeletedUDPServicePorts) != 1 || res.DeletedUDPServicePorts[0].Port() != 53 {
		t.Errorf("after deleting the service: DeletedUDPServicePorts = %v, want port 53", res.DeletedUDPServicePorts)
	}
}
