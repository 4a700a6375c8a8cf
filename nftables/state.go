//go:build linux

package nftables

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
)

// tableState is what the engine believes the kernel's table holds: after
// a full sync, what the listing showed plus what the sync wrote; after a
// partial sync, what the last successful transactions committed. Partial
// syncs diff against it and never list the kernel.
type tableState struct {
	declared bool // table and containers exist
	// localhostMap: the localhost node-port reject map exists
	// (plan_localhost.go).
	localhostMap bool
	chains       map[string]string // chain → content hash ("" unknown or empty)
	// counts are the rules a listing found in each chain, where it counted
	// them: a chain whose first rule carries the right hash but whose rule
	// count differs was edited by hand below its first rule. Writes of
	// ours drop the entry (the listing no longer describes the chain).
	counts map[string]int
	sets   map[string]time.Duration // affinity set → timeout
	elems  [numContainers]elemSet   // per container: key → value
	// foreign are listed elements of forms the engine never writes
	// (elem.go), deleted by the full sync that listed them.
	foreign []foreignElem
	stale   map[string]time.Time // flushed chains to delete once unreferenced
	// refs counts, per hairpin-connections key, the services whose
	// recorded plans hold it: two services selecting the same pods share
	// their hairpin entries, which stay until the last one drops them.
	refs map[elemKey]int
	// slots are the endpoint-map slots the listed chains' first-rule
	// comments name (endpoint_maps.go); nil when no comments were listed.
	slots map[string]slotRef
	// eps are the endpoint maps' elements (st.elems holds none of them).
	eps [numEndpointMaps]epSet
	// epsListed: eps come from a listing, not only from the engine's own
	// transactions (which keep them equal to the recorded plans': the
	// steady resync then checks counts only, not 100,000 elements).
	epsListed bool
}

func newTableState() *tableState {
	st := &tableState{
		chains: map[string]string{},
		counts: map[string]int{},
		sets:   map[string]time.Duration{},
		stale:  map[string]time.Time{},
		refs:   map[elemKey]int{},
	}
	for c := range st.elems {
		st.elems[c] = elemSet{}
	}
	for m := range st.eps {
		st.eps[m] = newEpSet(0)
	}
	return st
}

// reserve gives the empty maps a full sync of nPorts service ports fills
// the room it needs (about a chain per port, an element per port in
// cluster-ips and service-ips): a map filled from empty is rehashed at
// every doubling. Maps already holding a listing are left alone.
//
// nEps (the endpoints of all service ports) sizes the TCP endpoint maps,
// which hold about all of them, spread evenly by the chains' hashes.
func (st *tableState) reserve(nPorts, nEps int) {
	for m, p := 0, endpointMapProtos[0]; m < p.shards; m++ {
		if st.eps[m].len() == 0 {
			// Slots, about one per chain of 10 endpoints.
			st.eps[m] = newEpSet(nEps / 8 / p.shards)
		}
	}
	if len(st.chains) == 0 {
		st.chains = make(map[string]string, nPorts+nPorts/8+64)
	}
	for _, c := range [...]container{ctrClusterIPs, ctrServiceIPs} {
		if len(st.elems[c]) == 0 {
			st.elems[c] = make(elemSet, nPorts)
		}
	}
}

// listNames returns the names of the table's chains, sets and maps, as
// knftables' ListAll does, with chain names from lister when set.
func listNames(ctx context.Context, nft knftables.Interface, lister ChainCommentLister) (map[string][]string, error) {
	if lister == nil {
		return nft.ListAll(ctx)
	}
	all := map[string][]string{}
	for _, kind := range []string{"set", "map"} {
		names, err := nft.List(ctx, kind)
		if err != nil {
			return nil, err
		}
		all[kind] = names
	}
	chains, err := lister.ListChainNames(ctx)
	if err != nil {
		return nil, err
	}
	all["chain"] = chains
	return all, nil
}

// listState reads the table once: object names, every rule's comment (the
// first rule of each chain carries the chain's content hash), and the
// elements of the engine's containers. A missing table is an empty state.
//
// known, when not nil, is the state the engine recorded (a periodic
// resync): chains that still exist keep their recorded content hashes and
// only object names and elements are listed, which is far cheaper than
// reading every chain's first rule. family is the table's
// (unix.NFPROTO_IPV4 or NFPROTO_IPV6), whose address length the
// lister's element keys have.
func listState(ctx context.Context, nft knftables.Interface, lister ChainCommentLister, family byte, known *tableState) (*tableState, error) {
	st := newTableState()
	var rules []*knftables.Rule
	if lister != nil {
		ok, err := lister.TableExists(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			return st, nil
		}
	} else if known == nil {
		// nft reports a missing table as not found (the netlink listing
		// behind ListAll does not say so in a form that can be tested).
		var err error
		rules, err = nft.ListRules(ctx, "")
		if isNotFound(err) {
			return st, nil
		}
		if err != nil {
			return nil, err
		}
	}
	all, err := listNames(ctx, nft, lister)
	if isNotFound(err) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	comments := map[string]*string{}
	switch {
	case known != nil:
		for _, n := range all["chain"] {
			if h, ok := known.chains[n]; ok {
				c := hashPrefix + h
				comments[n] = &c
			} else if _, stale := known.stale[n]; !stale {
				comments[n] = nil // unknown content
			}
		}
	case lister != nil:
		heads, err := lister.ChainHeads(ctx, all["chain"])
		if err != nil {
			return nil, err
		}
		for n, h := range heads {
			comments[n] = h.Comment
			st.counts[n] = h.Rules
		}
	default:
		for _, r := range rules {
			if _, seen := comments[r.Chain]; !seen {
				comments[r.Chain] = r.Comment
			}
			st.counts[r.Chain]++
		}
	}
	if known != nil {
		for n, c := range known.counts {
			st.counts[n] = c
		}
	}
	present := map[string]bool{}
	for _, n := range all["set"] {
		present[n] = true
		if strings.HasPrefix(n, prefixAffinitySet) {
			st.sets[n] = -1 // timeout unknown: taken as the desired one
		}
	}
	for _, n := range all["map"] {
		present[n] = true
	}
	st.declared = true
	for c := range numContainers {
		st.declared = st.declared && (c.optional() || present[c.name()])
	}
	st.localhostMap = present[mapLocalhostNodePortReject]
	for _, n := range all["chain"] {
		st.chains[n] = ""
	}
	for chain, comment := range comments {
		if sl, ok := slotFromComment(comment); ok {
			if st.slots == nil {
				st.slots = map[string]slotRef{}
			}
			st.slots[chain] = sl
		}
		if h := hashFromComment(comment); h != "" {
			st.chains[chain] = h
		} else {
			st.chains[chain] = "?" // rules of unknown content
		}
	}
	for c := range numContainers {
		if !present[c.name()] {
			continue
		}
		var foreign []foreignElem
		if c.isData() {
			st.epsListed = true
			m := int(c - ctrEndpoints)
			if lister != nil {
				st.eps[m], foreign, err = listEps(ctx, lister, c, family)
			} else {
				var elems []*knftables.Element
				elems, err = nft.ListElements(ctx, "map", c.name())
				if isNotFound(err) {
					err = nil
				}
				st.eps[m], foreign = parseListedEps(c, elems)
			}
			if err != nil {
				return nil, err
			}
			st.foreign = append(st.foreign, foreign...)
			continue
		}
		if lister != nil {
			// Typed from the kernel's bytes, no text between (but for
			// foreign keys).
			m, f, err := listElements(ctx, lister, c, family)
			if err != nil {
				return nil, err
			}
			st.elems[c], foreign = m, f
		} else {
			typ := "map"
			if c.isSet() {
				typ = "set"
			}
			elems, err := nft.ListElements(ctx, typ, c.name())
			if err != nil && !isNotFound(err) {
				return nil, err
			}
			st.elems[c], foreign = parseListedElems(c, len(elems), func(i int) ([]string, string) {
				return elems[i].Key, strings.Join(elems[i].Value, " . ")
			})
		}
		st.foreign = append(st.foreign, foreign...)
	}
	return st, nil
}

// chainWrite is a chain (re)written: declared, flushed if it existed, and
// filled.
type chainWrite struct {
	spec    *chainSpec
	existed bool
}

// changeSet is the difference between the state and what is wanted, for
// one transaction; commit applies it to the state once the kernel took it.
type changeSet struct {
	declare   *staticPlan // declare the table and containers
	localhost *localhostObjects
	writes    []chainWrite
	flushes   []string // chains going stale
	deletes   []string // stale chains deleted now
	setAdds   []setSpec
	setDels   []string
	// elemDels and elemAdds point into the plans (or at elements of
	// their own): a cold start's 20,000 are not copied.
	elemDels []*elemSpec
	elemAdds []*elemSpec
	// foreignDels deletes listed elements of forms the engine never
	// writes (through nft: the encoder knows only the engine's forms).
	foreignDels []foreignElem
	plans       map[types.NamespacedName]*servicePlan
	// seenWritten are the chains this change set writes, for
	// staleDeletes; nil in the service chunks of a full sync (the first
	// chunk deletes the stale chains).
	seenWritten map[string]bool
	// claimed are the container keys this sync added (shared by the
	// chunks of one full sync): a second service asking for the same key
	// (two services with one node port, say) is skipped and counted in
	// conflicts, never added twice (nft would fail the transaction).
	claimed   map[containerKey]*elemSpec // key → the element (its value)
	conflicts *int
	// deleted are the container keys this change set deletes (at most
	// once each).
	deleted map[containerKey]bool
	// hairpin: per hairpin-connections key, how many services of this
	// change set take it (+) or drop it (-); sealHairpin turns it into
	// element additions and deletions.
	hairpin map[elemKey]int
	// partial: a partial sync's change set, which may go over netlink.
	partial bool
	// expect: about how many services the chunk after this one will hold
	// (0: as many as this one).
	expect int
	// chunked: one of a full sync's chunks, whose messages' slice (and,
	// once committed, maps and slices: nextChunk) a later chunk reuses.
	chunked bool
	// epDels are the endpoint maps' elements deleted (before anything is
	// added); epAdds those added, in runs that are the plans' own slices
	// (a cold start adds 100,000 of them: no copy), epAddN how many;
	// epDeleted the keys deleted (at most once each), by slotKey.
	epDels    []epElem
	epAdds    [][]epElem
	epAddN    int
	epDeleted map[uint64]bool
	// encoding: its netlink encoding under way (startEncode), or nil.
	encoding <-chan encodedBatch
	// opsWrites is what ops counted for writes[:opsCounted].
	opsWrites, opsCounted int
}

// containerKey is an element's key in one container, packed (elemID) into
// 22 bytes (elemKey and container take 40): a full sync's claimed map
// holds every element of the table.
type containerKey struct {
	id        elemID
	container container
}

func ckey(k elemKey, c container) containerKey { return containerKey{idOf(k), c} }

// claimedValue is the value a claim stands for (nil: a set's element).
func claimedValue(e *elemSpec) verdict {
	if e == nil {
		return verdict{}
	}
	return e.value
}

func newChangeSet() *changeSet {
	return &changeSet{plans: map[types.NamespacedName]*servicePlan{}, seenWritten: map[string]bool{},
		claimed: map[containerKey]*elemSpec{}, conflicts: new(int), deleted: map[containerKey]bool{}, hairpin: map[elemKey]int{},
		epDeleted: map[uint64]bool{}}
}

// next returns an empty change set for the next chunk of the same sync.
func (cs *changeSet) next() *changeSet {
	n := newChangeSet()
	n.claimed, n.conflicts = cs.claimed, cs.conflicts
	return n
}

// nextChunk is next, sized as cs: the service chunks of a full sync are
// alike (each about MaxTransactionOps), and filling each from empty
// regrows its slices and maps a dozen times. done, when not nil, is a
// chunk of the same sync written and committed: its maps and slices are
// emptied and taken instead of new ones (nothing refers to them once
// committed: commit copies what it records).
func (cs *changeSet) nextChunk(done *changeSet) *changeSet {
	var n *changeSet
	if done != nil && done.chunked && done.encoding == nil {
		clear(done.plans)
		clear(done.deleted)
		clear(done.hairpin)
		clear(done.epDeleted)
		clear(done.writes)
		clear(done.elemAdds)
		clear(done.epAdds)
		n = &changeSet{plans: done.plans, writes: done.writes[:0], elemAdds: done.elemAdds[:0],
			deleted: done.deleted, hairpin: done.hairpin, epAdds: done.epAdds[:0], epDeleted: done.epDeleted}
		*done = changeSet{}
	} else {
		n = &changeSet{
			plans:     make(map[types.NamespacedName]*servicePlan, max(len(cs.plans), cs.expect)),
			writes:    make([]chainWrite, 0, max(len(cs.writes), cs.expect)),
			elemAdds:  make([]*elemSpec, 0, max(len(cs.elemAdds), 2*cs.expect)),
			deleted:   map[containerKey]bool{},
			hairpin:   map[elemKey]int{},
			epAdds:    make([][]epElem, 0, max(len(cs.epAdds), cs.expect)),
			epDeleted: map[uint64]bool{},
		}
	}
	n.claimed, n.conflicts, n.chunked = cs.claimed, cs.conflicts, true
	return n
}

func (cs *changeSet) empty() bool {
	return cs.declare == nil && cs.localhost.empty() && len(cs.writes) == 0 && len(cs.flushes) == 0 && len(cs.deletes) == 0 &&
		len(cs.setAdds) == 0 && len(cs.setDels) == 0 && len(cs.elemDels) == 0 && len(cs.elemAdds) == 0 && len(cs.foreignDels) == 0 &&
		len(cs.epDels) == 0 && len(cs.epAdds) == 0
}

// ops is about how many nft commands the change set renders to. The
// writes' share is summed once per write (writes are only appended): a
// full sync asks after every service, which summing every write each
// time made quadratic in the chunk.
func (cs *changeSet) ops() int {
	for ; cs.opsCounted < len(cs.writes); cs.opsCounted++ {
		cs.opsWrites += 2 + len(cs.writes[cs.opsCounted].spec.rules)
	}
	return cs.opsWrites + len(cs.flushes) + len(cs.deletes) + len(cs.setAdds) + 2*len(cs.setDels) + len(cs.elemDels) + len(cs.elemAdds) +
		len(cs.foreignDels) + len(cs.epDels) + cs.epAddN
}

// renderedOps is the number of nft commands render writes for cs (what
// knftables' NumOperations reports).
func (cs *changeSet) renderedOps() int {
	n := len(cs.deletes) + len(cs.elemDels) + len(cs.foreignDels) + len(cs.flushes) + len(cs.setDels) + len(cs.setAdds) + len(cs.elemAdds) +
		len(cs.epDels) + cs.epAddN
	if cs.declare != nil {
		n += 1 + len(cs.declare.maps)
	}
	n += cs.localhost.ops()
	for _, w := range cs.writes {
		n += 1 + len(w.spec.rules)
		if w.existed {
			n++
		}
	}
	return n
}

// diffChains adds to cs the chains of want that the state lacks or holds
// with other content, and makes stale those of had that want lacks.
func (cs *changeSet) diffChains(st *tableState, want, had []chainSpec) {
	for i := range want {
		c := &want[i]
		h, ok := st.chains[c.name]
		if n, counted := st.counts[c.name]; ok && h == c.hash && (!counted || n == c.ruleCount()) {
			continue
		}
		_, wasStale := st.stale[c.name]
		cs.writes = append(cs.writes, chainWrite{spec: c, existed: ok || wasStale})
		if cs.seenWritten != nil {
			cs.seenWritten[c.name] = true
		}
	}
	for _, c := range had {
		if containsChain(want, c.name) {
			continue
		}
		if _, ok := st.chains[c.name]; ok {
			cs.flushes = append(cs.flushes, c.name)
		}
	}
}

func containsChain(cs []chainSpec, name string) bool {
	for i := range cs {
		if cs[i].name == name {
			return true
		}
	}
	return false
}

func (cs *changeSet) diffSets(st *tableState, want, had []setSpec) {
	for _, s := range want {
		t, ok := st.sets[s.name]
		switch {
		case !ok:
			cs.setAdds = append(cs.setAdds, s)
		case t < 0:
			st.sets[s.name] = s.timeout // listed: assume ours
		case t != s.timeout:
			cs.setDels = append(cs.setDels, s.name)
			cs.setAdds = append(cs.setAdds, s)
		}
	}
	for _, s := range had {
		if containsSet(want, s.name) {
			continue
		}
		if _, ok := st.sets[s.name]; ok {
			cs.setDels = append(cs.setDels, s.name)
		}
	}
}

func containsSet(ss []setSpec, name string) bool {
	for _, s := range ss {
		if s.name == name {
			return true
		}
	}
	return false
}

func (cs *changeSet) diffElems(st *tableState, want, had []elemSpec) {
	for i := range want {
		e := &want[i]
		if e.container == ctrHairpin {
			if !containsElem(had, *e) {
				cs.hairpin[e.key]++
			}
			continue
		}
		ck := ckey(e.key, e.container)
		if v, ok := cs.claimed[ck]; ok {
			if claimedValue(v) != e.value {
				*cs.conflicts++
			}
			continue // the same element twice (a cluster IP of two ports)
		}
		cs.claimed[ck] = e
		id := idOf(e.key)
		cur, ok := st.elems[e.container][id]
		switch {
		case !ok || cs.deleted[ck]:
			cs.elemAdds = append(cs.elemAdds, e)
		case *cur != e.value:
			cs.deleted[ck] = true
			cs.elemDels = append(cs.elemDels, e)
			cs.elemAdds = append(cs.elemAdds, e)
		case cur != &e.value:
			// The same value: recorded as the new plan's, so that the
			// record does not keep the old plan's elements alive.
			st.elems[e.container][id] = &e.value
		}
	}
	for i := range had {
		e := &had[i]
		if containsElem(want, *e) {
			continue
		}
		if e.container == ctrHairpin {
			cs.hairpin[e.key]--
			continue
		}
		// Deleted once only: a key shared by several ports of the service
		// (its cluster IP in cluster-ips), or one another service of this
		// change set took over (a node port moving between services), is
		// not deleted again (nft fails a transaction that deletes an
		// element twice).
		ck := ckey(e.key, e.container)
		if _, claimed := cs.claimed[ck]; claimed || cs.deleted[ck] {
			continue
		}
		if st.elems[e.container].has(e.key) {
			cs.deleted[ck] = true
			cs.elemDels = append(cs.elemDels, e)
		}
	}
}

func containsElem(es []elemSpec, e elemSpec) bool {
	for _, x := range es {
		if x.container == e.container && x.key == e.key {
			return true
		}
	}
	return false
}

// sealHairpin adds the hairpin-connections elements the change set's
// services take that the table lacks, and deletes those no service holds
// any more (st.refs counts the services of the recorded plans). Called
// once the change set holds all its services.
func (cs *changeSet) sealHairpin(st *tableState) {
	if len(cs.hairpin) == 0 {
		return
	}
	keys := make([]elemKey, 0, len(cs.hairpin))
	for k := range cs.hairpin {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, elemKey.compare)
	for _, k := range keys {
		after := st.refs[k] + cs.hairpin[k]
		inKernel := st.elems[ctrHairpin].has(k)
		ck := ckey(k, ctrHairpin)
		e := &elemSpec{container: ctrHairpin, key: k}
		switch {
		case after > 0 && !inKernel:
			if _, claimed := cs.claimed[ck]; !claimed {
				cs.claimed[ck] = nil
				cs.elemAdds = append(cs.elemAdds, e)
			}
		case after <= 0 && inKernel && !cs.deleted[ck]:
			cs.deleted[ck] = true
			cs.elemDels = append(cs.elemDels, e)
		}
	}
	clear(cs.hairpin)
}

// countHairpin adds d to the references of plan's hairpin entries.
func (st *tableState) countHairpin(plan *servicePlan, d int) {
	if plan == nil {
		return
	}
	for i := range plan.elems {
		if e := &plan.elems[i]; e.container == ctrHairpin {
			if st.refs[e.key] += d; st.refs[e.key] <= 0 {
				delete(st.refs, e.key)
			}
		}
	}
}

// diffService adds what moving one service from had to want needs.
func (cs *changeSet) diffService(st *tableState, name types.NamespacedName, had, want *servicePlan) {
	var w, h servicePlan
	if want != nil {
		w = *want
	}
	if had != nil {
		h = *had
	}
	cs.diffChains(st, w.chains, h.chains)
	cs.diffSets(st, w.sets(), h.sets())
	cs.diffElems(st, w.elems, h.elems)
	cs.diffEps(st, w.eps, h.eps)
	cs.plans[name] = want
}

// keepService records sp, a plan the state holds (recordHolds), as
// diffService(st, name, nil, sp) would: its chains and sets are what the
// state holds, so only its elements go through diffElems, which claims
// them (a later service asking for one of them conflicts), counts its
// hairpin entries, and adds one again where an earlier service of this
// change set deleted it.
func (cs *changeSet) keepService(st *tableState, name types.NamespacedName, sp *servicePlan) {
	cs.diffElems(st, sp.elems, nil) // (its endpoint-map elements claim nothing)
	cs.plans[name] = sp
}

// staleDeletes deletes chains stale for at least staleDelay that this
// change set does not write again. (Kernels before 6.2 notice a chain is
// no longer referenced by a deleted map element only a moment later, so
// stale chains are flushed first and deleted by a later sync, as
// upstream.)
func (cs *changeSet) staleDeletes(st *tableState, now time.Time) (pending bool) {
	var names []string
	for n, t := range st.stale {
		if cs.seenWritten[n] {
			continue
		}
		if now.Sub(t) >= staleDelay {
			names = append(names, n)
		} else {
			pending = true
		}
	}
	sort.Strings(names)
	cs.deletes = append(cs.deletes, names...)
	return pending
}

const staleDelay = time.Second

// commit applies cs to the state and the per-service plans.
func (cs *changeSet) commit(st *tableState, plans map[types.NamespacedName]*servicePlan, now time.Time) {
	if cs.declare != nil {
		st.declared = true
	}
	cs.localhost.commit(st)
	for _, n := range cs.deletes {
		delete(st.stale, n)
		delete(st.chains, n)
		delete(st.counts, n)
	}
	for _, e := range cs.elemDels {
		st.elems[e.container].del(e.key)
	}
	if len(cs.foreignDels) > 0 {
		// removeUnwanted deletes them all at once.
		st.foreign = nil
	}
	for _, n := range cs.flushes {
		delete(st.chains, n)
		delete(st.counts, n)
		st.stale[n] = now
	}
	for _, w := range cs.writes {
		st.chains[w.spec.name] = w.spec.hash
		delete(st.counts, w.spec.name)
		delete(st.stale, w.spec.name)
	}
	for _, n := range cs.setDels {
		delete(st.sets, n)
	}
	for _, s := range cs.setAdds {
		st.sets[s.name] = s.timeout
	}
	for _, e := range cs.elemAdds {
		st.elems[e.container].put(e.key, &e.value)
	}
	for _, e := range cs.epDels {
		st.eps[e.m].del(e.idx)
	}
	for _, run := range cs.epAdds {
		// A run is of one map, of one or more chains: split by slot.
		for len(run) > 0 {
			n := 1
			for n < len(run) && run[n].m == run[0].m && run[n].idx>>slotBits == run[0].idx>>slotBits {
				n++
			}
			st.eps[run[0].m].putRun(run[:n])
			run = run[n:]
		}
	}
	for n, p := range cs.plans {
		st.countHairpin(plans[n], -1)
		st.countHairpin(p, 1)
		if p == nil {
			delete(plans, n)
		} else {
			plans[n] = p
		}
	}
}
