//go:build linux

package nftables

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// The endpoint maps: numEndpointMaps data maps service-endpoints-NN
// ("typeof numgen random mod 1 : ip daddr . tcp dport"), declared with
// the table. Measured against one rule per endpoint and upstream's inline
// maps (BENCHMARKS.md, "which table shape would meet the 1,000-service and
// partial-sync targets"): a policy chain's one "meta l4proto P dnat ip to
// numgen random mod N offset K map @service-endpoints-NN" rule and its N
// elements cost the kernel a third of N rules to load, and replacing an
// endpoint is an element deletion and addition, which does not make the
// kernel validate the whole table. The maps are several because the
// kernel checks every element added to a map against every rule bound to
// it: one map for all services is quadratic.

// The maps are per protocol: nft (1.0.6) refuses "meta l4proto udp dnat
// … map @m" when m, read back from the kernel, is declared with "th dport"
// ("conflicting protocols specified: udp vs. th"), so each map's value is
// typed by its protocol's port ("ip daddr . tcp dport"). TCP has the most
// maps, as it has the most services.
var endpointMapProtos = [...]struct {
	proto  uint8
	name   string
	shards int
}{{unix.IPPROTO_TCP, "tcp", 64}, {unix.IPPROTO_UDP, "udp", 16}, {unix.IPPROTO_SCTP, "sctp", 4}}

// numEndpointMaps is how many endpoint maps the table declares.
const numEndpointMaps = 64 + 16 + 4

const prefixEndpointMap = "service-endpoints-"

// endpointMapName is endpoint map i's name ("service-endpoints-tcp-07").
func endpointMapName(i int) string {
	for _, p := range endpointMapProtos {
		if i < p.shards {
			s := strconv.Itoa(i)
			if len(s) < 2 {
				s = "0" + s
			}
			return prefixEndpointMap + p.name + "-" + s
		}
		i -= p.shards
	}
	return ""
}

// endpointMapProto is the protocol (its nft name) of endpoint map i.
func endpointMapProto(i int) string {
	for _, p := range endpointMapProtos {
		if i < p.shards {
			return p.name
		}
		i -= p.shards
	}
	return ""
}

// endpointMap is the name of endpoint map i, without allocating.
func endpointMap(i uint8) string { return containerNames[ctrEndpoints+container(i)] }

// A policy chain that picks among its endpoints through an endpoint map
// owns a slot of the map: the keys from slot<<slotBits on, one per
// endpoint ("numgen random mod N offset slot<<slotBits"). A hash of its
// name picks its map and the slot it prefers; if another chain holds
// that slot, the next free one (so the planning order decides only
// between chains whose hashes collide, about one pair in 10,000 services
// per map). A chain with more endpoints than a slot holds keeps one rule
// per endpoint.
const (
	slotBits        = 12
	maxMapEndpoints = 1 << slotBits
	maxSlot         = 1<<(32-slotBits) - 1
	// slotCommentPrefix starts the map rule's own comment, which carries
	// its map and slot ("svcproxy-slot:3/37", before the chain's content
	// hash): a restart reads it back with the chains' comments and gives
	// every chain the slot it had, so a correct table is not rewritten.
	slotCommentPrefix = "svcproxy-slot:"
)

// endpointMapOf is the endpoint map of the policy chain named chain
// (among its protocol's, by FNV-1a of the name); false for a protocol
// without maps.
func endpointMapOf(chain string, proto uint8) (int, bool) {
	first := 0
	for _, p := range endpointMapProtos {
		if p.proto == proto {
			return first + int(fnvString(fnvOffset64, chain)%uint64(p.shards)), true
		}
		first += p.shards
	}
	return 0, false
}

// preferredSlot is the slot chain takes when it is free.
func preferredSlot(chain string) uint32 {
	return 1 + uint32((fnvString(fnvOffset64, chain)>>32)%maxSlot)
}

// slotRef is a chain's map and slot.
type slotRef struct {
	m    uint8
	slot uint32
}

// offset is the slot's first key.
func (r slotRef) offset() uint32 { return r.slot << slotBits }

// endpointSlots is the record of which chain owns which slot of each
// endpoint map. Slots are taken when a chain is planned and given back by
// a full sync's sweep, after its last transaction, so a slot one chain
// leaves is not another's in the same sync. (A slot handed over within a
// sync would still be right: diffEps deletes a key's old value before
// adding the new one, once.)
type endpointSlots struct {
	owner map[string]slotRef
	// used, per map: slot → owning chain. Slot 0 is never used (nft
	// lists "offset 0" as nothing). Elements the table holds in a slot no
	// chain owns do not keep it from a chain: the diff replaces the
	// chain's keys whose values differ (diffEps) and a full sync deletes
	// the rest (unwantedEps), so a table whose rules were flushed by hand
	// is rewritten into the same slots rather than into new ones.
	used [numEndpointMaps]map[uint32]string
}

func newEndpointSlots() *endpointSlots {
	s := &endpointSlots{owner: map[string]slotRef{}}
	for m := range s.used {
		s.used[m] = map[uint32]string{}
	}
	return s
}

// reserve sizes an empty record for about nChains chains (a cold start:
// filled from empty, the maps would be rehashed at every doubling).
func (s *endpointSlots) reserve(nChains int) {
	if len(s.owner) > 0 || nChains < 1024 {
		return
	}
	s.owner = make(map[string]slotRef, nChains)
	perMap := nChains / endpointMapProtos[0].shards
	for m := range endpointMapProtos[0].shards {
		s.used[m] = make(map[uint32]string, perMap+perMap/4)
	}
}

// get returns chain's slot, taking its preferred one, else the next free
// one, if it has none; false when the map has no free slot.
func (s *endpointSlots) get(chain string, proto uint8) (slotRef, bool) {
	m, ok := endpointMapOf(chain, proto)
	if !ok {
		return slotRef{}, false
	}
	if r, ok := s.owner[chain]; ok {
		if int(r.m) == m {
			return r, true
		}
		s.release(chain) // another protocol (its name holds it: not seen)
	}
	used := s.used[m]
	if len(used) >= maxSlot {
		return slotRef{}, false
	}
	sl := preferredSlot(chain)
	for {
		if _, taken := used[sl]; !taken {
			break
		}
		if sl++; sl > maxSlot {
			sl = 1
		}
	}
	used[sl] = chain
	r := slotRef{m: uint8(m), slot: sl}
	s.owner[chain] = r
	return r, true
}

// claim gives chain slot sl of map m if that slot is free.
func (s *endpointSlots) claim(chain string, m int, sl uint32) bool {
	if _, owned := s.owner[chain]; owned || sl == 0 || sl > maxSlot || m < 0 || m >= numEndpointMaps {
		return false
	}
	if _, taken := s.used[m][sl]; taken {
		return false
	}
	s.used[m][sl] = chain
	s.owner[chain] = slotRef{m: uint8(m), slot: sl}
	return true
}

// release gives chain's slot back.
func (s *endpointSlots) release(chain string) {
	r, ok := s.owner[chain]
	if !ok {
		return
	}
	delete(s.owner, chain)
	if s.used[r.m][r.slot] == chain {
		delete(s.used[r.m], r.slot)
	}
}

// reseedSlots is the record a full sync starts from: the slots the
// chains' comments name (st.slots, listed), then the ones prev gave
// chains that still exist (a sync that listed no comments).
func reseedSlots(st *tableState, prev *endpointSlots) *endpointSlots {
	s := newEndpointSlots()
	for chain, r := range st.slots {
		if _, ok := st.chains[chain]; ok {
			s.claim(chain, int(r.m), r.slot)
		}
	}
	if prev != nil {
		for chain, r := range prev.owner {
			if _, ok := st.chains[chain]; ok {
				s.claim(chain, int(r.m), r.slot)
			}
		}
	}
	return s
}

// sweep gives back the slots of chains the table no longer holds (a
// chain that kept its name but left its map for rules keeps its slot,
// empty, until it goes).
func (s *endpointSlots) sweep(chains map[string]string) {
	for chain := range s.owner {
		if _, ok := chains[chain]; !ok {
			s.release(chain)
		}
	}
}

// slotComment is the map rule's comment naming its map and slot
// ("svcproxy-slot:3/37": map 3, slot 37).
func slotComment(r slotRef) string { return string(appendSlotComment(nil, r)) }

func appendSlotComment(b []byte, r slotRef) []byte {
	b = strconv.AppendUint(append(b, slotCommentPrefix...), uint64(r.m), 10)
	return strconv.AppendUint(append(b, '/'), uint64(r.slot), 10)
}

// slotFromComment reads the map and slot a chain's first-rule comment
// names.
func slotFromComment(c *string) (slotRef, bool) {
	if c == nil {
		return slotRef{}, false
	}
	rest, ok := strings.CutPrefix(*c, slotCommentPrefix)
	if !ok {
		return slotRef{}, false
	}
	if i := strings.IndexByte(rest, ' '); i >= 0 {
		rest = rest[:i]
	}
	ms, ss, ok := strings.Cut(rest, "/")
	m, err1 := strconv.Atoi(ms)
	n, err2 := strconv.ParseUint(ss, 10, 32)
	if !ok || err1 != nil || err2 != nil || m < 0 || m >= numEndpointMaps || n == 0 || n > maxSlot {
		return slotRef{}, false
	}
	r := slotRef{m: uint8(m), slot: uint32(n)}
	if slotComment(r) != slotCommentPrefix+rest {
		return slotRef{}, false
	}
	return r, true
}

// epElem is one element of an endpoint map: key idx of map m, value an
// address and port. Without pointers (unlike netip.Addr), so the hundred
// thousand a 10,000-service table holds are not scanned by the collector.
type epElem struct {
	idx uint32
	ep  epVal
	m   uint8
}

// epVal is an endpoint map element's value.
type epVal struct {
	addr [16]byte // IPv4 in the first four
	port uint16
	v6   bool
}

func makeEpVal(ap netip.AddrPort) epVal {
	v := epVal{port: ap.Port(), v6: ap.Addr().Is6()}
	if v.v6 {
		v.addr = ap.Addr().As16()
	} else {
		a4 := ap.Addr().As4()
		copy(v.addr[:], a4[:])
	}
	return v
}

// addrPort is v as a netip.AddrPort.
func (v epVal) addrPort() netip.AddrPort {
	if v.v6 {
		return netip.AddrPortFrom(netip.AddrFrom16(v.addr), v.port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(v.addr[:4])), v.port)
}

// ctr is e's container.
func (e *epElem) ctr() container { return ctrEndpoints + container(e.m) }

// slotKey orders elements (deterministic transactions) and keys sets of
// them: map, then index.
func (e *epElem) slotKey() uint64 { return uint64(e.m)<<32 | uint64(e.idx) }

// keyText and valueText are e as nft writes it ("28675", "10.0.0.1 . 80").
func (e *epElem) keyText() []string { return []string{strconv.FormatUint(uint64(e.idx), 10)} }

func (e *epElem) valueText() []string {
	ap := e.ep.addrPort()
	return []string{ap.Addr().String(), strconv.Itoa(int(ap.Port()))}
}

// parseEpValue reads a value as valueText writes it ("10.0.0.1 . 80").
func parseEpValue(value string) (epVal, bool) {
	a, p, ok := strings.Cut(value, " . ")
	if !ok {
		return epVal{}, false
	}
	addr, err := netip.ParseAddr(a)
	if err != nil || addr.Zone() != "" {
		return epVal{}, false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return epVal{}, false
	}
	v := makeEpVal(netip.AddrPortFrom(addr, uint16(port)))
	e := epElem{ep: v}
	if t := e.valueText(); t[0] != a || t[1] != p {
		return epVal{}, false
	}
	return v, true
}

// epSet is what an endpoint map holds, by slot: each slot's elements
// sorted by index. A slot a sync wrote whole records the plan's own
// elements (putRun: a cold start's 100,000 are not copied; plans are
// never modified); a change to part of a slot first copies it.
type epSet struct {
	slots map[uint32]epRun
	n     int
}

// epRun is one slot's elements, sorted by index; own when the slice is
// the set's (not a plan's), so it may be changed in place.
type epRun struct {
	e   []epElem
	own bool
}

func newEpSet(slots int) epSet { return epSet{slots: make(map[uint32]epRun, slots)} }

func (s *epSet) len() int { return s.n }

// find returns where idx is (or would be) in its slot's run.
func (s *epSet) find(idx uint32) (epRun, int, bool) {
	r := s.slots[idx>>slotBits]
	if len(r.e) == 0 {
		return r, 0, false
	}
	if i := int(idx - r.e[0].idx); idx >= r.e[0].idx && i < len(r.e) && r.e[i].idx == idx {
		return r, i, true // a plan's run: consecutive indexes
	}
	i, ok := slices.BinarySearchFunc(r.e, idx, func(e epElem, idx uint32) int { return cmp.Compare(e.idx, idx) })
	return r, i, ok
}

func (s *epSet) get(idx uint32) (epVal, bool) {
	r, i, ok := s.find(idx)
	if !ok {
		return epVal{}, false
	}
	return r.e[i].ep, true
}

// owned returns r's elements as a slice the set owns.
func (r epRun) owned() []epElem {
	if r.own {
		return r.e
	}
	return slices.Clone(r.e)
}

// put records e (its idx and value; e.m is the set's map).
func (s *epSet) put(e epElem) {
	r, i, ok := s.find(e.idx)
	es := r.owned()
	if ok {
		es[i] = e
	} else {
		es = slices.Insert(es, i, e)
		s.n++
	}
	s.slots[e.idx>>slotBits] = epRun{e: es, own: true}
}

// putRun records run (elements of one slot, sorted by index, from a
// plan): kept as it is when the slot held nothing.
func (s *epSet) putRun(run []epElem) {
	sl := run[0].idx >> slotBits
	if len(s.slots[sl].e) == 0 {
		s.slots[sl] = epRun{e: run[:len(run):len(run)]}
		s.n += len(run)
		return
	}
	for _, e := range run {
		s.put(e)
	}
}

func (s *epSet) del(idx uint32) {
	r, i, ok := s.find(idx)
	if !ok {
		return
	}
	s.n--
	if len(r.e) == 1 {
		delete(s.slots, idx>>slotBits)
		return
	}
	s.slots[idx>>slotBits] = epRun{e: slices.Delete(r.owned(), i, i+1), own: true}
}

// all calls f for every element (no order).
func (s *epSet) all(f func(e *epElem)) {
	for _, r := range s.slots {
		for i := range r.e {
			f(&r.e[i])
		}
	}
}

// listedEps builds an epSet from a listing (in any order): appended per
// slot, sorted once at the end.
type listedEps struct{ s epSet }

func newListedEps(n int) *listedEps { return &listedEps{s: newEpSet(n/8 + 1)} }

func (l *listedEps) add(m uint8, idx uint32, v epVal) {
	sl := idx >> slotBits
	r := l.s.slots[sl]
	l.s.slots[sl] = epRun{e: append(r.e, epElem{idx: idx, m: m, ep: v}), own: true}
}

func (l *listedEps) done() epSet {
	for sl, r := range l.s.slots {
		slices.SortFunc(r.e, func(a, b epElem) int { return cmp.Compare(a.idx, b.idx) })
		r.e = slices.CompactFunc(r.e, func(a, b epElem) bool { return a.idx == b.idx })
		l.s.slots[sl] = r
		l.s.n += len(r.e)
	}
	return l.s
}

// diffEps adds to cs what makes the endpoint maps hold want instead of
// had (a service's elements), against st: a key whose value changes is
// deleted and added again (a data map's element cannot change in place),
// a key the state holds with another value (a listing after a failure)
// likewise.
func (cs *changeSet) diffEps(st *tableState, want, had []epElem) {
	run := -1 // want[run:i] are added
	for i := range want {
		w := &want[i]
		cur, ok := st.eps[w.m].get(w.idx)
		switch {
		case ok && cur == w.ep && !cs.epDeleted[w.slotKey()]:
			cs.addEps(want, run, i)
			run = -1
			continue
		case ok && !cs.epDeleted[w.slotKey()]:
			cs.epDeleted[w.slotKey()] = true
			cs.epDels = append(cs.epDels, epElem{idx: w.idx, m: w.m, ep: cur})
		}
		if run < 0 {
			run = i
		}
	}
	cs.addEps(want, run, len(want))
	if len(had) == 0 {
		return
	}
	wanted := func(h *epElem) bool {
		for i := range want {
			if want[i].idx == h.idx && want[i].m == h.m {
				return true
			}
		}
		return false
	}
	if len(want) > 16 {
		set := make(map[uint64]bool, len(want))
		for i := range want {
			set[want[i].slotKey()] = true
		}
		wanted = func(h *epElem) bool { return set[h.slotKey()] }
	}
	for i := range had {
		h := &had[i]
		if wanted(h) || cs.epDeleted[h.slotKey()] {
			continue
		}
		if cur, ok := st.eps[h.m].get(h.idx); ok {
			cs.epDeleted[h.slotKey()] = true
			cs.epDels = append(cs.epDels, epElem{idx: h.idx, m: h.m, ep: cur})
		}
	}
}

// addEps adds want[from:to] (nothing when from < 0) as runs of one map
// each.
func (cs *changeSet) addEps(want []epElem, from, to int) {
	if from < 0 {
		return
	}
	for from < to {
		end := from + 1
		for end < to && want[end].m == want[from].m {
			end++
		}
		cs.epAdds = append(cs.epAdds, want[from:end:end])
		cs.epAddN += end - from
		from = end
	}
}

// unwantedEps lists the endpoint maps' elements st holds that no plan of
// want holds. In the steady state st holds exactly the planned ones,
// which is checked without building a set.
func unwantedEps(st *tableState, want map[types.NamespacedName]*servicePlan) []epElem {
	planned, held := 0, 0
	for m := range st.eps {
		held += st.eps[m].len()
	}
	for _, sp := range want {
		planned += len(sp.eps)
	}
	if planned == held && !st.epsListed {
		return nil // the record's own elements are the plans' (state.go)
	}
	all := planned == held
	for _, sp := range want {
		for i := range sp.eps {
			if !all {
				break
			}
			e := &sp.eps[i]
			if cur, ok := st.eps[e.m].get(e.idx); !ok || cur != e.ep {
				all = false
			}
		}
	}
	if all {
		return nil
	}
	set := make(map[uint64]epVal, planned)
	for _, sp := range want {
		for i := range sp.eps {
			set[sp.eps[i].slotKey()] = sp.eps[i].ep
		}
	}
	var out []epElem
	for m := range st.eps {
		st.eps[m].all(func(e *epElem) {
			if w, ok := set[e.slotKey()]; !ok || w != e.ep {
				out = append(out, *e)
			}
		})
	}
	slices.SortFunc(out, func(a, b epElem) int { return cmp.Compare(a.slotKey(), b.slotKey()) })
	return out
}

// parseListedEps reads endpoint map c's elements as nft lists them; one
// not as valueText writes it is foreign (deleted by its key).
func parseListedEps(c container, elems []*knftables.Element) (epSet, []foreignElem) {
	out := newListedEps(len(elems))
	var foreign []foreignElem
	for _, el := range elems {
		if len(el.Key) == 1 {
			if idx, err := strconv.ParseUint(el.Key[0], 10, 32); err == nil && strconv.FormatUint(idx, 10) == el.Key[0] {
				if v, ok := parseEpValue(strings.Join(el.Value, " . ")); ok {
					out.add(uint8(c-ctrEndpoints), uint32(idx), v)
					continue
				}
			}
		}
		foreign = append(foreign, foreignElem{container: c, key: el.Key})
	}
	return out.done(), foreign
}
