//go:build linux

package nftables

import (
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEndpointSlots: a chain gets the slot its name prefers, else the
// next free one; keeps it; gives it back; moves maps with its protocol;
// and a full sync's record starts from the slots the listed comments
// name, then the previous record's (listed elements take no slot).
func TestEndpointSlots(t *testing.T) {
	s := newEndpointSlots()
	a, ok := s.get("chain-a", unix.IPPROTO_TCP)
	m, mok := endpointMapOf("chain-a", unix.IPPROTO_TCP)
	if !ok || !mok || a.slot != preferredSlot("chain-a") || int(a.m) != m || endpointMapProto(m) != "tcp" {
		t.Fatalf("chain-a: %+v %v; want map %d slot %d", a, ok, m, preferredSlot("chain-a"))
	}
	if again, _ := s.get("chain-a", unix.IPPROTO_TCP); again != a {
		t.Errorf("chain-a moved: %+v -> %+v", a, again)
	}
	if _, ok := s.get("chain-icmp", unix.IPPROTO_ICMP); ok {
		t.Error("a protocol without maps got a slot")
	}

	// Another chain holds chain-b's preferred slot: the next one.
	mb, _ := endpointMapOf("chain-b", unix.IPPROTO_TCP)
	s2 := newEndpointSlots()
	if !s2.claim("squatter", mb, preferredSlot("chain-b")) {
		t.Fatal("claim of a free slot refused")
	}
	if s2.claim("other", mb, preferredSlot("chain-b")) || s2.claim("squatter", mb, 7) || s2.claim("z", mb, 0) || s2.claim("z", numEndpointMaps, 1) {
		t.Error("claim of a used slot, a second slot, slot 0 or a map out of range taken")
	}
	b, _ := s2.get("chain-b", unix.IPPROTO_TCP)
	if want := preferredSlot("chain-b")%maxSlot + 1; b.slot != want {
		t.Errorf("chain-b: slot %d, want %d (the next after the squatter's)", b.slot, want)
	}

	// Released, the slot is free again; a protocol change moves the chain.
	s2.release("squatter")
	if !s2.claim("late", mb, preferredSlot("chain-b")) {
		t.Error("a released slot stayed used")
	}
	u, _ := s2.get("chain-b", unix.IPPROTO_UDP)
	if endpointMapProto(int(u.m)) != "udp" {
		t.Errorf("chain-b as UDP: map %d (%s)", u.m, endpointMapName(int(u.m)))
	}
	if _, still := s2.used[mb][b.slot]; still {
		t.Error("the TCP slot of chain-b was not given back")
	}

	// The sweep keeps the chains the table holds only.
	s2.sweep(map[string]string{"chain-b": "h"})
	if _, ok := s2.owner["late"]; ok || len(s2.owner) != 1 {
		t.Errorf("after the sweep: %v", s2.owner)
	}

	// A full sync's record: the comments' slots (chains that exist),
	// then the previous record's, and the listed elements' slots.
	st := newTableState()
	st.chains["chain-a"], st.chains["chain-c"] = "h", "h"
	ma, _ := endpointMapOf("chain-a", unix.IPPROTO_TCP)
	st.slots = map[string]slotRef{"chain-a": {m: uint8(ma), slot: 77}, "gone": {m: uint8(ma), slot: 78}}
	st.eps[ma].put(epElem{idx: 99<<slotBits + 1, m: uint8(ma), ep: epVal{port: 80}})
	prev := newEndpointSlots()
	cc, _ := prev.get("chain-c", unix.IPPROTO_TCP)
	r := reseedSlots(st, prev)
	if got := r.owner["chain-a"]; got.slot != 77 || int(got.m) != ma {
		t.Errorf("chain-a from its comment: %+v", got)
	}
	if got := r.owner["chain-c"]; got != cc {
		t.Errorf("chain-c from the previous record: %+v, want %+v", got, cc)
	}
	if _, ok := r.owner["gone"]; ok {
		t.Error("a chain that no longer exists kept its slot")
	}
	if owner, ok := r.used[ma][99]; ok {
		t.Errorf("slot 99 (listed elements of no chain) taken by %q", owner)
	}
}

// TestSlotComments: the map rule's comment names its map and slot, read
// back before the content hash; other forms are not slots.
func TestSlotComments(t *testing.T) {
	r := slotRef{m: 70, slot: 4321}
	c := slotComment(r) + " " + hashPrefix + "abc"
	if got, ok := slotFromComment(&c); !ok || got != r || hashFromComment(&c) != "abc" {
		t.Errorf("%q: %+v %v, hash %q", c, got, ok, hashFromComment(&c))
	}
	for _, bad := range []string{"", "svcproxy-slot:", "svcproxy-slot:4", "svcproxy-slot:4/0", "svcproxy-slot:84/1",
		"svcproxy-slot:4/01", "svcproxy-slot:04/1", "svcproxy-slot:4/1048576", "svcproxy-slot:-1/3", "x svcproxy-slot:4/1"} {
		if got, ok := slotFromComment(&bad); ok {
			t.Errorf("%q read as %+v", bad, got)
		}
	}
	if _, ok := slotFromComment(nil); ok {
		t.Error("no comment read as a slot")
	}
}

// TestEndpointSlotLimits: a policy chain of one endpoint, or of more than
// a slot holds, keeps its rules; a planner without slots too.
func TestEndpointSlotLimits(t *testing.T) {
	p := &planner{slots: newEndpointSlots()}
	for _, tc := range []struct {
		n    int
		want bool
	}{{1, false}, {2, true}, {maxMapEndpoints, true}, {maxMapEndpoints + 1, false}} {
		if _, ok := p.endpointSlot("chain", unix.IPPROTO_TCP, tc.n); ok != tc.want {
			t.Errorf("%d endpoints: slot %v, want %v", tc.n, ok, tc.want)
		}
	}
	if _, ok := (&planner{}).endpointSlot("chain", unix.IPPROTO_TCP, 3); ok {
		t.Error("a planner without slots gave one")
	}
}

// The record of an endpoint map keeps a plan's run as it is and copies it
// before changing part of it: the plan (still the record of its service)
// must not change under it.
func TestEpSetSharesPlansRuns(t *testing.T) {
	const slot = 5 << slotBits
	plan := []epElem{{idx: slot, ep: epVal{port: 1}}, {idx: slot + 1, ep: epVal{port: 2}}, {idx: slot + 2, ep: epVal{port: 3}}}
	keep := slices.Clone(plan)
	s := newEpSet(0)
	s.putRun(plan)
	if s.len() != 3 || &s.slots[5].e[0] != &plan[0] {
		t.Fatalf("the run was not kept as it is: %d elements", s.len())
	}
	for i, e := range plan {
		if v, ok := s.get(e.idx); !ok || v != plan[i].ep {
			t.Errorf("get(%d) = %v, %v", e.idx, v, ok)
		}
	}
	if _, ok := s.get(slot + 3); ok {
		t.Error("an index past the run found")
	}
	s.put(epElem{idx: slot + 1, ep: epVal{port: 9}})
	s.del(slot)
	s.put(epElem{idx: slot + 7, ep: epVal{port: 7}})
	s.putRun([]epElem{{idx: slot + 5, ep: epVal{port: 5}}})
	if !slices.Equal(plan, keep) {
		t.Fatalf("the plan's run changed: %v", plan)
	}
	var got []string
	s.all(func(e *epElem) { got = append(got, fmt.Sprintf("%d=%d", e.idx-slot, e.ep.port)) })
	slices.Sort(got)
	if want := []string{"1=9", "2=3", "5=5", "7=7"}; !slices.Equal(got, want) || s.len() != 4 {
		t.Errorf("record %v (len %d), want %v", got, s.len(), want)
	}
	for _, idx := range []uint32{slot + 1, slot + 2, slot + 5, slot + 7} {
		s.del(idx)
	}
	if s.len() != 0 || len(s.slots) != 0 {
		t.Errorf("emptied set holds %d elements in %d slots", s.len(), len(s.slots))
	}

	// A listing arrives in any order, a key possibly twice.
	l := newListedEps(4)
	for _, idx := range []uint32{slot + 3, 9<<slotBits + 1, slot, slot + 3} {
		l.add(0, idx, epVal{port: uint16(idx)})
	}
	ls := l.done()
	if ls.len() != 3 {
		t.Fatalf("listed set holds %d elements, want 3", ls.len())
	}
	for _, idx := range []uint32{slot, slot + 3, 9<<slotBits + 1} {
		if v, ok := ls.get(idx); !ok || v.port != uint16(idx) {
			t.Errorf("listed get(%d) = %v, %v", idx, v, ok)
		}
	}
}
