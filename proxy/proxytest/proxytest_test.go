package proxytest

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

func TestFeederEvents(t *testing.T) {
	topo := DefaultTopology(v1.IPv4Protocol)
	rec := &Recorder{}
	f := NewFeeder(rec)
	svc := MakeService(topo, "a", topo.ServiceIP(1), []ServicePortSpec{{Name: "p", Port: 80}}, nil)
	svcB := MakeService(topo, "b", topo.ServiceIP(2), []ServicePortSpec{{Name: "p", Port: 80}}, nil)
	sl := MakeSlice(topo, "a", "1", []SlicePortSpec{{Name: "p", Port: 80}}, EndpointSpec{Pod: topo.LocalPods[0]})

	if err := f.Apply(Objects{Services: []*v1.Service{svc, svc}}); err == nil || !strings.Contains(err.Error(), "duplicate Service") {
		t.Errorf("duplicate service: err = %v", err)
	}
	if err := f.Apply(Objects{EndpointSlices: []*discovery.EndpointSlice{nil}}); err == nil {
		t.Error("nil slice accepted")
	}
	if ev := rec.Events(); len(ev) != 0 {
		t.Fatalf("rejected Apply delivered events: %v", ev)
	}

	must := func(o Objects) []string {
		t.Helper()
		if err := f.Apply(o); err != nil {
			t.Fatal(err)
		}
		return rec.Events()
	}
	got := must(Objects{Services: []*v1.Service{svcB, svc}, EndpointSlices: []*discovery.EndpointSlice{sl}})
	want := []string{"service add conformance/a rv 1", "service add conformance/b rv 2", "endpointslice add conformance/a-1 rv 3"}
	if !slices.Equal(got, want) {
		t.Errorf("adds: got %q, want %q", got, want)
	}
	// The same state again (even as new but equal objects) is no event.
	if got := must(Objects{Services: []*v1.Service{svc.DeepCopy(), svcB}, EndpointSlices: []*discovery.EndpointSlice{sl}}); len(got) != 0 {
		t.Errorf("unchanged state delivered %q", got)
	}
	// Mutating the caller's object after Apply does not change what was sent,
	// and shows up as an update on the next Apply.
	svc.Spec.Ports[0].Port = 81
	got = must(Objects{Services: []*v1.Service{svc}, EndpointSlices: []*discovery.EndpointSlice{sl}})
	want = []string{"service delete conformance/b rv 2", "service update conformance/a rv 1->4"}
	if !slices.Equal(got, want) {
		t.Errorf("update/delete: got %q, want %q", got, want)
	}
	f.Synced()
	f.Synced()
	got = rec.Events()
	want = []string{"service synced", "endpointslice synced", "node synced"}
	if !slices.Equal(got, want) {
		t.Errorf("synced: got %q, want %q", got, want)
	}
	// Node rename is delete then add.
	n := MakeNode(topo, "z")
	must(Objects{Node: n})
	n2 := n.DeepCopy()
	n2.Name = "other"
	got = must(Objects{Node: n2})
	want = []string{"node delete node-a rv 5", "node add other rv 6"}
	if !slices.Equal(got, want) {
		t.Errorf("node rename: got %q, want %q", got, want)
	}
}

func TestMatch(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.1:80")
	b := netip.MustParseAddrPort("10.0.0.2:80")
	c := netip.MustParseAddrPort("10.0.0.3:80")
	for _, tc := range []struct {
		name      string
		want, got Result
		sampled   bool
		ok        bool
	}{
		{"same", ForwardedTo(true, a, b), ForwardedTo(true, b, a, a), false, true},
		{"verdict", ForwardedTo(true, a), Result{Verdict: Dropped}, false, false},
		{"backends", ForwardedTo(false, a, b), ForwardedTo(false, a), false, false},
		{"masquerade", ForwardedTo(false, a), ForwardedTo(true, a), false, false},
		{"non-forwarded ignores fields", Result{Verdict: Rejected}, Result{Verdict: Rejected, Masquerade: true, Backends: []netip.AddrPort{a}}, false, true},
		{"sticky exact", StickyTo(false, a, b), ForwardedTo(false, a, b), false, false},
		{"sampled sticky one backend", StickyTo(false, a, b, c), StickyTo(false, b), true, true},
		{"sampled sticky not sticky", StickyTo(false, a, b), ForwardedTo(false, a, b), true, false},
		{"sampled sticky unknown backend", StickyTo(false, a, b), StickyTo(false, c), true, false},
		{"sampled sticky masquerade", StickyTo(true, a, b), StickyTo(false, a), true, false},
		{"sampled single backend stickiness unobservable", StickyTo(false, a), ForwardedTo(false, a), true, true},
		{"sampled non-sticky seen sticky", ForwardedTo(false, a, b), StickyTo(false, a), true, false},
	} {
		why := Match(tc.want, tc.got, tc.sampled)
		if (why == "") != tc.ok {
			t.Errorf("%s: Match(%s, %s, %v) = %q, want ok=%v", tc.name, tc.want, tc.got, tc.sampled, why, tc.ok)
		}
	}
}

func TestValidateRejectsBadTables(t *testing.T) {
	topo := DefaultTopology(v1.IPv4Protocol)
	good := Check{Name: "c", Packet: FromPodTo(topo, topo.ServiceIP(1), 80), Want: Result{Verdict: NotProxied}}
	for name, sc := range map[string]Scenario{
		"no steps":            {Name: "s"},
		"no checks":           {Name: "s", Steps: []Step{{Name: "st"}}},
		"duplicate check":     {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{good, good}}}},
		"pod source not pod":  {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{{Name: "c", Packet: From(good.Packet, topo.NodeIP), Want: good.Want}}}}},
		"wrong family":        {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{{Name: "c", Packet: FromPodTo(topo, netip.MustParseAddr("fd00::1"), 80), Want: good.Want}}}}},
		"port without server": {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{{Name: "c", Packet: FromPodTo(topo, topo.ServiceIP(1), 1234), Want: good.Want}}}}},
		"backend not a pod":   {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{{Name: "c", Packet: good.Packet, Want: ForwardedTo(false, netip.AddrPortFrom(topo.NodeIP, 8080))}}}}},
		"forwarded nowhere":   {Name: "s", Steps: []Step{{Name: "st", Checks: []Check{{Name: "c", Packet: good.Packet, Want: Result{Verdict: Forwarded}}}}}},
		"service port":        {Name: "s", Steps: []Step{{Name: "st", Objects: Objects{Services: []*v1.Service{MakeService(topo, "x", topo.ServiceIP(1), []ServicePortSpec{{Port: 9999}}, nil)}}, Checks: []Check{good}}}},
	} {
		if err := Validate(topo, []Scenario{sc}); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
	if err := Validate(topo, []Scenario{{Name: "s", Steps: []Step{{Name: "st", Checks: []Check{good}}}}}); err != nil {
		t.Errorf("good table rejected: %v", err)
	}
}

func tinyTable(topo Topology) []Scenario {
	svc := MakeService(topo, "web", topo.ServiceIP(1), []ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
	ck := func(name string, want Result) Check {
		return Check{Name: name, Packet: FromPodTo(topo, topo.ServiceIP(1), 80), Want: want}
	}
	return []Scenario{{
		Name: "tiny",
		Steps: []Step{
			{Name: "one", Objects: Objects{Services: []*v1.Service{svc}}, Checks: []Check{ck("a", Result{Verdict: NotProxied})}},
			{Name: "two", Objects: Objects{}, Checks: []Check{ck("b", Result{Verdict: NotProxied}), ck("c", Result{Verdict: Rejected})}},
		},
	}}
}

func TestShuffle(t *testing.T) {
	topo := DefaultTopology(v1.IPv4Protocol)
	table := Scenarios(topo)
	a, b := Shuffle(table, 7, 3), Shuffle(table, 7, 3)
	if len(a) == 0 || Validate(topo, a) != nil {
		t.Fatalf("shuffled table empty or invalid: %v", Validate(topo, a))
	}
	if !slices.Equal(Names(a), Names(b)) {
		t.Error("same seed, different order")
	}
	if slices.Equal(Names(a), Names(Shuffle(table, 8, 3))) {
		t.Error("different seeds, same order")
	}
	multi := 0
	for _, sc := range table {
		if len(sc.Steps) > 1 && !sc.Ordered {
			multi++
		}
	}
	if len(a) != multi {
		t.Errorf("%d shuffled scenarios, want the %d unordered ones with several steps", len(a), multi)
	}
	for _, sc := range a {
		orig := table[slices.IndexFunc(table, func(s Scenario) bool { return s.Name == sc.Name })]
		if len(sc.Steps) != 3*len(orig.Steps) {
			t.Errorf("%s: %d steps, want %d", sc.Name, len(sc.Steps), 3*len(orig.Steps))
		}
	}
	q := Quirk{Scenario: "x", Step: "step", Reason: "r"}
	if !q.Matches("x", "step#3", "c") || q.Matches("x", "steps", "c") {
		t.Error("quirks must match repeated steps by their original name only")
	}
}

func TestApplyQuirks(t *testing.T) {
	topo := DefaultTopology(v1.IPv4Protocol)
	table := tinyTable(topo)
	rewritten := Result{Verdict: NotProxied}
	got, err := ApplyQuirks(table, []Quirk{
		{Scenario: "tiny", Step: "two", Check: "c", Reason: "test: rewrite", Adjust: func(Result) Result { return rewritten }},
		{Scenario: "tiny", Step: "one", Reason: "test: skip every check of step one"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range got[0].Steps {
		switch st.Name {
		case "one":
			if len(st.Checks) != 0 {
				t.Errorf("step one keeps %d checks, want none (skipped)", len(st.Checks))
			}
		case "two":
			for _, c := range st.Checks {
				if c.Name == "c" && c.Want.Verdict != NotProxied {
					t.Errorf("check c wants %v, want the quirk's %v", c.Want, rewritten)
				}
			}
		}
	}
	// The input is left as it was.
	if fresh := tinyTable(topo); len(table[0].Steps[0].Checks) != len(fresh[0].Steps[0].Checks) {
		t.Errorf("ApplyQuirks modified its input")
	}
	for _, st := range table[0].Steps {
		for _, c := range st.Checks {
			if st.Name == "two" && c.Name == "c" && c.Want.Verdict == NotProxied {
				t.Errorf("ApplyQuirks modified its input's wanted result")
			}
		}
	}
	if _, err := ApplyQuirks(table, []Quirk{{Scenario: "tiny", Check: "zz", Reason: "stale"}}); err == nil {
		t.Errorf("a quirk matching no check was accepted")
	}
	if _, err := ApplyQuirks(table, []Quirk{{Scenario: "tiny"}}); err == nil {
		t.Errorf("a quirk without a Reason was accepted")
	}
}
