//go:build linux

package nftables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/internal/nfgen"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// Proxier is the nftables engine: kube-proxy's nftables mode on the
// engine base. Its methods are the base's (see engine.Base).
type Proxier struct {
	*engine.Base
	p *proxier
}

// proxier is the engine's own state, touched only from the hooks (which
// the base never runs concurrently).
type proxier struct {
	cfg Config
	nft knftables.Interface
	ifs Interfaces
	log logr.Logger

	state  *tableState                           // what the kernel holds, as far as we know
	plans  map[types.NamespacedName]*servicePlan // what each service was last written as
	static *staticPlan                           // the fixed part last written
	slots  *endpointSlots                        // the policy chains' endpoint-map slots
	// custody is the ruleset generation at which state was last known
	// to match the kernel (resync.go).
	custody nfgen.Custody
	// keepRules keeps the rules of recorded plans (tests compare them).
	keepRules bool
	// custodyRead: custody goes back to a listing that read every
	// chain's content hash (not one that trusted recorded ones).
	custodyRead bool
	// localhost serves TCP node ports on loopback (nil unless
	// Config.LocalhostNodePorts and a loopback node-port address).
	localhost *localhostProxy
	// nl is the netlink writer's switch, fallback and self-check
	// (fastpath.go).
	nl netlinkState
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier returns an nftables Proxier for cfg (defaults applied) that
// drives ifs. Nothing touches the node before the first Sync after both
// initial lists are synced.
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	if ifs.NFTables == nil {
		return nil, errors.New("nftables: Interfaces.NFTables is required")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &proxier{
		cfg:   cfg,
		nft:   ifs.NFTables,
		ifs:   ifs,
		log:   cfg.Logger.WithValues("engine", "nftables"),
		state: newTableState(),
		plans: map[types.NamespacedName]*servicePlan{},
		slots: newEndpointSlots(),
	}
	p.nl.arenas = newArenaPool(os.Getenv(envHeapBuffers) == "1")
	if newLocalhostMode(cfg.LocalhostNodePorts, cfg.IPFamily, cfg.NodePortAddresses).proxy {
		p.localhost = newLocalhostProxy(&cfg, ifs.LocalhostSockets, p.log)
	}
	p.decideNetlink()
	base, err := engine.New(cfg.Common, engine.Hooks{
		Name:            "nftables",
		Apply:           p.apply,
		DryRun:          p.dryRun,
		Drifted:         p.drifted,
		Unchanged:       p.lastCommitHolds,
		Cleanup:         p.cleanup,
		Close:           p.close,
		MakeServicePort: makeServicePort,
	})
	if err != nil {
		return nil, err
	}
	return &Proxier{Base: base, p: p}, nil
}

// trimArenas gives the pages of the free netlink arenas but a few back
// to the kernel and reports what is left (the arenas are outside the Go
// heap, so no other metric shows them).
func (p *proxier) trimArenas() {
	p.nl.arenas.Trim()
	if st := p.nl.arenas.Stats(); !st.Heap || st.Mapped > 0 {
		p.cfg.Metrics.SetFastWriterBuffers(p.cfg.IPFamily, metrics.WriterNFTablesNetlink, st.Resident, st.Mapped)
	}
}

func (p *proxier) planner(u *changetracker.Update) *planner {
	pl := newPlanner(&p.cfg)
	pl.nodeLabels = u.NodeLabels
	pl.slots = p.slots
	return pl
}

func (p *proxier) apply(ctx context.Context, req *engine.Request) (engine.Result, error) {
	// Every batch's arenas are back once the sync returns: give the pages
	// of all but a few to the kernel.
	defer p.trimArenas()
	if req.Full {
		return p.fullSync(ctx, req)
	}
	u := req.Update
	pl := p.planner(u)
	cs := newChangeSet()
	names := make([]types.NamespacedName, 0, len(u.ChangedServices))
	for n := range u.ChangedServices {
		names = append(names, n)
	}
	sortNames(names)
	cs.partial = true
	for _, n := range names {
		cs.diffService(p.state, n, p.plans[n], pl.planService(u.ServicePorts[n], u.Services, u.Endpoints))
	}
	cs.sealHairpin(p.state)
	pending := cs.staleDeletes(p.state, req.Now)
	writes, err := p.runTracked(ctx, cs, req.Now)
	if err != nil {
		return engine.Result{}, err
	}
	if p.localhost != nil {
		p.localhost.update(names, p.plans, false)
	}
	p.logConflicts(*cs.conflicts)
	return engine.Result{Writes: writes, RequeueAfter: requeue(pending)}, nil
}

// logConflicts reports services that asked for a set or map key another
// service already holds (two services with the same node port or the same
// external IP and port): the first one keeps it.
func (p *proxier) logConflicts(n int) {
	if n > 0 {
		p.log.Info("Services claim nftables keys other services already hold; the first keeps each", "conflicts", n)
	}
}

func requeue(pending bool) time.Duration {
	if pending {
		return staleDelay + 100*time.Millisecond
	}
	return 0
}

// run renders cs into one transaction, runs it and commits it to the
// state, only once the kernel took it. An empty change set runs nothing.
// A change set (a partial sync's, or one chunk of a full sync's) goes over
// netlink when Interfaces.Netlink is set and the encoder knows every
// object in it; else through nft (the table and its containers, base
// chains, the fixed chains' rules).
func (p *proxier) run(ctx context.Context, cs *changeSet, now time.Time) (int, error) {
	if cs.empty() {
		p.commit(cs, now)
		return 0, nil
	}
	if p.nl.on.Load() {
		if b := cs.encoded(p.nl.arenas, p.family()); b.err == nil {
			err := writeEncoded(ctx, p.ifs.Netlink, &b)
			msgs := len(b.msgs)
			// The writer keeps nothing of the messages once it returned:
			// the slice goes to a later chunk of a full sync.
			spare := b.msgs
			b.release()
			if cs.chunked {
				clear(spare)
				p.nl.spareMsgs = spare[:0]
			}
			var be *BatchError
			switch {
			case errors.As(err, &be):
				// Refused: nothing of it applied; nft writes it.
				n, err := p.refusedOverNetlink(ctx, cs, msgs, err)
				if err != nil {
					return 0, err
				}
				p.commit(cs, now)
				return n, nil
			case err != nil:
				return 0, fmt.Errorf("netlink transaction of %d messages: %w", msgs, err)
			}
			if p.nl.checkNext {
				p.nl.checkNext = false
				if err := p.selfCheckNetlink(ctx, cs); err != nil {
					return 0, err
				}
			}
			n := cs.renderedOps()
			p.commit(cs, now)
			return n, nil
		}
		// A form the encoder does not know: nft writes it.
		p.log.V(4).Info("Transaction through nft: the change set holds a form the netlink encoder does not know", "partial", cs.partial)
	}
	// An encoding begun for cs while the writer was on (it was switched
	// off since) still reads cs: it ends, and its arenas go back, before
	// commit releases cs's rules.
	cs.dropEncoding()
	n, err := p.runNFT(ctx, cs)
	if err != nil {
		return 0, err
	}
	p.commit(cs, now)
	return n, nil
}

// runNFT writes cs through nft, as one transaction.
func (p *proxier) runNFT(ctx context.Context, cs *changeSet) (int, error) {
	tx := p.nft.NewTransaction()
	render(tx, cs)
	n := tx.NumOperations()
	if err := p.nft.Run(ctx, tx); err != nil {
		return 0, fmt.Errorf("nft transaction of %d operations: %w", n, err)
	}
	return n, nil
}

// commit records cs once the kernel took it, and releases the rules of
// the plans it records: a recorded plan is diffed by its chains' names
// and content hashes, its sets and its elements, never by its rules, so
// the typed rules of the whole table are not kept between syncs.
func (p *proxier) commit(cs *changeSet, now time.Time) {
	cs.commit(p.state, p.plans, now)
	if p.keepRules {
		return
	}
	for _, sp := range cs.plans {
		if sp == nil {
			continue
		}
		for i := range sp.chains {
			if c := &sp.chains[i]; c.rules != nil {
				c.nrules, c.rules = len(c.rules), nil
			}
		}
	}
}

// startEncode encodes cs for netlink on a goroutine of its own (the
// encoding reads cs only; run waits for it); nothing without a netlink
// writer. The write itself stays on the caller's goroutine, whose thread
// is in the network namespace to write to.
func (p *proxier) startEncode(cs *changeSet) {
	if !p.nl.on.Load() || cs.empty() {
		return
	}
	ch := make(chan encodedBatch, 1)
	fam := p.family()
	pool := p.nl.arenas
	msgs := p.nl.spareMsgs
	p.nl.spareMsgs = nil
	go func() { ch <- encodePooled(pool, fam, cs, msgs) }()
	cs.encoding = ch
}

// family is the netfilter family of the proxier's table.
func (p *proxier) family() byte {
	if p.cfg.IPFamily == v1.IPv6Protocol {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// fullSync lists the table once, diffs every service against it and
// writes what differs, in transactions of at most MaxTransactionOps
// operations (services are never split across two).
func (p *proxier) fullSync(ctx context.Context, req *engine.Request) (engine.Result, error) {
	u := req.Update
	// The first batch this sync writes over netlink is read back.
	p.nl.checkNext = p.nl.on.Load()
	// After a restart, a failure, drift, a cleanup or on request, the
	// record of what the chains hold is gone or not to be trusted: read
	// every chain's content hash and rule count. So does the periodic
	// resync when it lists at all (something committed to nftables since
	// our last transaction: possibly a hand edit inside a chain of ours).
	// A node-change or engine-asked resync trusts the hashes recorded for
	// chains that still exist, and lists only names and elements.
	var known *tableState
	switch req.Reason {
	case engine.ReasonNode, engine.ReasonEngine:
		if p.static != nil {
			known = p.state
		}
	}
	st := p.state
	unchanged := req.Unchanged()
	if !unchanged {
		var err error
		if st, err = p.listStateTracked(ctx, known); err != nil {
			return engine.Result{}, fmt.Errorf("listing table %s: %w", TableName, err)
		}
	}
	// The maps this sync fills are sized from the service ports (about a
	// chain and an element in cluster-ips and service-ips each, at most
	// two claimed keys): built without a size they are rehashed a dozen
	// times over a cold start.
	nPorts, nEps := 0, 0
	for _, ports := range u.ServicePorts {
		nPorts += len(ports)
	}
	for _, eps := range u.Endpoints {
		nEps += len(eps)
	}
	recorded := p.recordedPlans(req, unchanged)
	// The slots the listed chains hold (their comments, else the record),
	// and those the listed elements fill. Without a listing the record
	// is the state's own.
	if !unchanged {
		p.slots = reseedSlots(st, p.slots)
	}
	p.state, p.plans = st, make(map[types.NamespacedName]*servicePlan, len(u.ServicePorts))
	st.refs = map[elemKey]int{} // counted again as the plans are recorded
	st.reserve(nPorts, nEps)
	p.slots.reserve(nPorts)
	pl := p.planner(u)
	pl.slabRules = 1024
	nodePortIPs, matchAll := p.nodePortAddresses()
	static := pl.planStatic(nodePortIPs, matchAll, p.cfg.ServiceCIDRs)
	// Services are planned one at a time as the chunks are filled (not
	// all of them first): a service's typed rules live from its planning
	// to its chunk's commit (releaseRules), so the whole table's rules are
	// never held at once.
	names := make([]types.NamespacedName, 0, len(u.ServicePorts))
	for n := range u.ServicePorts {
		names = append(names, n)
	}
	sortNames(names)

	// The first transaction: the fixed part. Whatever the table holds
	// that no service wants any more goes in the last one, once every
	// service's new chains are in place: an adopted table's services keep
	// their old chains (and those chains' targets) until then.
	first := newChangeSet()
	first.chunked = true
	first.claimed = make(map[containerKey]*elemSpec, 2*nPorts+len(static.elems))
	if !st.declared {
		first.declare = static
	}
	for _, n := range obsoleteBaseChains {
		if _, ok := st.chains[n]; ok {
			first.deletes = append(first.deletes, n)
			delete(st.chains, n)
		}
	}
	first.diffChains(st, static.chains, nil)
	first.diffElems(st, static.elems, nil)
	// The localhost objects: the map and counters declared first (the
	// rewritten nodeport-endpoints-check may look the map up); a reject
	// chain that goes, with its counter, last, after removeUnwanted has
	// deleted the map elements that jump to it.
	var lastLocalhost *localhostObjects
	first.localhost, lastLocalhost = diffLocalhost(st, pl.localhost, static.chains).split()
	pending := first.staleDeletes(st, req.Now)

	total := 0
	limit := p.cfg.MaxTransactionOps
	// The first service chunk is sized for about the services a chunk
	// holds (a service port writes a chain, a rule or two, two elements
	// and its endpoints): grown from first's size, its maps and slices
	// were a megabyte of garbage at 10,000 services.
	first.expect = nPorts
	if perPort := 4 + nEps/max(nPorts, 1); limit > 0 {
		first.expect = min(nPorts, limit/perPort)
	}
	cs := first
	// When the fixed part must be written through nft (the encoder does
	// not know the table, containers and base chains: a cold start, a
	// table flushed or deleted by hand, an adopted table), it goes alone
	// and every service chunk after it over netlink; with services in it,
	// the first chunk would go through nft whole.
	cutFirst := p.nl.on.Load() && needsNFT(first)
	// Each chunk is encoded for netlink (startEncode) while the kernel
	// takes the chunk before it: the kernel's part of a batch costs about
	// twice the encoding. The chunks hold disjoint services, so diffing
	// one before the previous is recorded sees the same state.
	var prev *changeSet
	// On an error, the encodings begun for chunks not written go back.
	defer func() {
		prev.dropEncoding()
		cs.dropEncoding()
		p.nl.spareMsgs = nil
	}()
	runPrev := func() error {
		if prev == nil {
			return nil
		}
		w, err := p.runTracked(ctx, prev, req.Now)
		total += w
		prev = nil
		return err
	}
	for _, n := range names {
		if sp := recordedPlan(recorded, u, st, n); sp != nil {
			cs.keepService(st, n, sp) // writes nothing: the chunk stays as it is
			continue
		}
		sp := pl.planService(u.ServicePorts[n], u.Services, u.Endpoints)
		if sp == nil {
			continue
		}
		if (limit > 0 && cs.ops() >= limit) || (cutFirst && cs == first) {
			cs.sealHairpin(st)
			p.startEncode(cs)
			done := prev
			if err := runPrev(); err != nil {
				return engine.Result{}, err
			}
			prev, cs = cs, cs.nextChunk(done)
		}
		cs.diffService(p.state, n, nil, sp)
	}
	cs.sealHairpin(st)
	p.startEncode(cs)
	if err := runPrev(); err != nil {
		return engine.Result{}, err
	}
	w, err := p.runTracked(ctx, cs, req.Now)
	total += w
	if err != nil {
		return engine.Result{}, err
	}
	last := cs.next()
	last.localhost = lastLocalhost
	// The slots of chains the table no longer holds go back (a chain
	// removeUnwanted flushes below goes at the next full sync).
	p.slots.sweep(p.state.chains)
	defer func() { p.state.epsListed = false }() // the record is ours once written
	p.removeUnwanted(last, p.state, p.plans, static, req.Now)
	if h, ok := p.state.chains[chainObsoleteMarkMasq]; ok {
		if h == "" {
			// Already empty: deleted a moment later, as removeUnwanted
			// does with empty service chains.
			delete(p.state.chains, chainObsoleteMarkMasq)
			p.state.stale[chainObsoleteMarkMasq] = req.Now
		} else {
			last.flushes = append(last.flushes, chainObsoleteMarkMasq)
		}
	}
	w, err = p.runTracked(ctx, last, req.Now)
	total += w
	if err != nil {
		return engine.Result{}, err
	}
	p.static = static
	if p.localhost != nil {
		p.localhost.update(nil, p.plans, true)
	}
	p.logConflicts(*cs.conflicts)
	return engine.Result{Writes: total, RequeueAfter: requeue(pending || len(p.state.stale) > 0)}, nil
}

// needsNFT: cs declares the table or writes a base chain, which the
// netlink encoder leaves to nft.
func needsNFT(cs *changeSet) bool {
	if cs.declare != nil || !cs.localhost.empty() {
		return true
	}
	for _, w := range cs.writes {
		if w.spec.base != nil {
			return true
		}
	}
	return false
}

// removeUnwanted adds to cs the removal of per-service chains, affinity
// sets and container elements in st that neither want nor static holds.
// cs shares the claims of the sync that diffed want and static
// (changeSet.next): every element they want is claimed there, but
// hairpin-connections', which st.refs counts once the plans are recorded.
func (p *proxier) removeUnwanted(cs *changeSet, st *tableState, want map[types.NamespacedName]*servicePlan, static *staticPlan, now time.Time) {
	// Sized from the state (what the table holds is about what is
	// wanted), keyed without building strings: at 10,000 services this
	// runs on every full resync over some 110,000 chains and 40,000
	// elements.
	chainsWanted := onlyWantedChains(st, want, static)
	var chains map[string]bool
	if !chainsWanted {
		chains = make(map[string]bool, len(st.chains))
	}
	sets := make(map[string]bool, len(st.sets))
	for _, sp := range want {
		if !chainsWanted {
			for _, c := range sp.chains {
				chains[c.name] = true
			}
		}
		for _, s := range sp.sets() {
			sets[s.name] = true
		}
	}
	var flush []string
	for n, h := range st.chains {
		if chainsWanted {
			break
		}
		if !isServiceObjectName(n) || chains[n] {
			continue
		}
		if h == "" {
			// Already empty (flushed by an earlier run, or by hand): delete
			// it a moment later, as any stale chain (an element this sync
			// deletes may still point at it).
			delete(st.chains, n)
			st.stale[n] = now
			continue
		}
		flush = append(flush, n)
	}
	sort.Strings(flush)
	cs.flushes = append(cs.flushes, flush...)
	var dels []string
	for n := range st.sets {
		if !sets[n] {
			dels = append(dels, n)
		}
	}
	sort.Strings(dels)
	cs.setDels = append(cs.setDels, dels...)
	cs.epDels = append(cs.epDels, unwantedEps(st, want)...)
	for c := range numContainers {
		if c.isData() {
			continue // st.eps
		}
		var keys []elemKey
		for id := range st.elems[c] {
			k := id.key()
			if c == ctrHairpin {
				if st.refs[k] <= 0 {
					keys = append(keys, k)
				}
			} else if _, wanted := cs.claimed[ckey(k, c)]; !wanted {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, elemKey.compare)
		for _, k := range keys {
			cs.elemDels = append(cs.elemDels, &elemSpec{container: c, key: k})
		}
	}
	cs.foreignDels = append(cs.foreignDels, st.foreign...)
}

// onlyWantedChains reports whether every service chain the state holds is
// wanted, the steady resync's case, with lookups instead of a map of the
// ~110,000 wanted names at 10,000 services and no walk of the state: each
// wanted chain is there, and the state holds no more chains than the
// wanted ones and the static ones it has. Names are unique across plans
// (each derives from its service port's name) and no static chain is a
// service chain, so the counts are of distinct names.
func onlyWantedChains(st *tableState, want map[types.NamespacedName]*servicePlan, static *staticPlan) bool {
	n := 0
	for i := range static.chains {
		if _, ok := st.chains[static.chains[i].name]; ok {
			n++
		}
	}
	for _, sp := range want {
		for i := range sp.chains {
			if _, ok := st.chains[sp.chains[i].name]; !ok {
				return false
			}
			n++
		}
	}
	return len(st.chains) == n
}

// nodePortAddresses returns the addresses node ports are served on, or
// matchAll for every local address.
func (p *proxier) nodePortAddresses() (ips []netip.Addr, matchAll bool) {
	v4 := p.cfg.IPFamily == v1.IPv4Protocol
	var prefixes []netip.Prefix
	for _, c := range p.cfg.NodePortAddresses {
		if c.Addr().Is4() != v4 {
			continue
		}
		if c.Bits() == 0 {
			return nil, true
		}
		prefixes = append(prefixes, c.Masked())
	}
	var cands []netip.Addr
	if len(prefixes) == 0 {
		if len(p.cfg.NodePortAddresses) > 0 {
			return nil, false // none of our family: no node ports
		}
		cands = p.cfg.NodeIPs
	} else {
		addrs, err := p.localAddresses()
		if err != nil {
			p.log.Error(err, "Listing local addresses for node ports; node ports may not work")
		}
		for _, a := range addrs {
			for _, pr := range prefixes {
				if pr.Contains(a.Unmap()) {
					cands = append(cands, a)
					break
				}
			}
		}
	}
	seen := map[netip.Addr]bool{}
	for _, a := range cands {
		a = a.Unmap()
		if a.Is4() != v4 || a.IsLoopback() || seen[a] {
			continue
		}
		seen[a] = true
		ips = append(ips, a)
	}
	sort.Slice(ips, func(i, j int) bool { return ips[i].Less(ips[j]) })
	return ips, false
}

func (p *proxier) localAddresses() ([]netip.Addr, error) {
	if p.cfg.LocalAddresses != nil {
		return p.cfg.LocalAddresses()
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if pr, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, pr.Addr())
		}
	}
	return out, nil
}

// dryRun renders the whole table as one transaction from an empty table
// (what a cold start writes), without touching the node or the state.
func (p *proxier) dryRun(_ context.Context, req *engine.Request) (string, error) {
	u := req.Update
	pl := p.planner(u)
	pl.slots = newEndpointSlots() // an empty table's, leaving the record alone
	nodePortIPs, matchAll := p.nodePortAddresses()
	static := pl.planStatic(nodePortIPs, matchAll, p.cfg.ServiceCIDRs)
	st := newTableState()
	cs := newChangeSet()
	cs.declare = static
	cs.diffChains(st, static.chains, nil)
	cs.diffElems(st, static.elems, nil)
	cs.localhost = diffLocalhost(st, pl.localhost, static.chains)
	want := pl.planAll(u.ServicePorts, u.Services, u.Endpoints)
	for _, n := range sortedNames(want) {
		cs.diffService(st, n, nil, want[n])
	}
	cs.sealHairpin(st) // the local endpoints' hairpin-connections elements
	tx := p.nft.NewTransaction()
	render(tx, cs)
	return tx.String(), nil
}

// drifted checks the services chain (the entry point of all service
// traffic) still holds what the last full sync wrote: a missing table,
// a flushed table or a rewritten services chain all show here, for the
// price of listing one two-rule chain.
func (p *proxier) drifted(ctx context.Context) (bool, error) {
	if p.static == nil {
		return false, nil
	}
	var want string
	for _, c := range p.static.chains {
		if c.name == chainServices {
			want = c.hash
		}
	}
	var rules []*knftables.Rule
	if list := p.chainLister(); list != nil {
		// Over netlink: nft fills its cache with every set's elements to
		// list one chain (at 40,000 services more than this interval's
		// worth of CPU; BENCHMARKS.md, 2026-12-02).
		got, err := list(ctx, []string{chainServices})
		if err != nil {
			return false, err
		}
		var ok bool
		if rules, ok = got[chainServices]; !ok {
			return true, nil // the chain or the table is missing
		}
	} else {
		var err error
		rules, err = p.nft.ListRules(ctx, chainServices)
		if isNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
	if len(rules) == 0 || hashFromComment(rules[0].Comment) != want {
		return true, nil
	}
	return false, nil
}

// cleanup deletes the kube-proxy table of this family (and of the other
// one when Interfaces.OtherFamily is set): ours, or upstream kube-proxy's.
func (p *proxier) cleanup(ctx context.Context) error {
	var errs []error
	for _, nft := range []knftables.Interface{p.nft, p.ifs.OtherFamily} {
		if nft == nil {
			continue
		}
		if err := deleteTable(ctx, nft); err != nil {
			errs = append(errs, err)
		}
	}
	p.state, p.plans, p.static = newTableState(), map[types.NamespacedName]*servicePlan{}, nil
	p.slots = newEndpointSlots()
	p.custody.Lose()
	if p.localhost != nil {
		// The table is gone; so are the node ports it described (the next
		// sync, full, opens them again).
		p.localhost.close()
	}
	return errors.Join(errs...)
}

// close stops the localhost node-port proxy: its listeners and
// connections (the table stays, as Close promises).
func (p *proxier) close() error {
	if p.localhost != nil {
		p.localhost.close()
	}
	return nil
}

func deleteTable(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	err := nft.Run(ctx, tx)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("deleting table %s: %w", TableName, err)
	}
	return nil
}

func sortNames(names []types.NamespacedName) {
	sort.Slice(names, func(i, j int) bool {
		if names[i].Namespace != names[j].Namespace {
			return names[i].Namespace < names[j].Namespace
		}
		return names[i].Name < names[j].Name
	})
}
