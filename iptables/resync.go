package iptables

import (
	"bytes"
	"context"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/internal/nfgen"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// A full resync of an unchanged ruleset skips the listing.
//
// A full sync lists the tables (iptables-save: the whole cost of a steady
// resync; BenchmarkKernelResync's "listed" case) and
// writes the chains that differ (chaindiff.go). The engine also keeps the
// digest of every nat and filter chain as the kernel holds it: the
// listing's, carried through every restore of ours (restore lines applied
// to the digests). It holds it valid while it can prove nobody else
// changed the tables since:
//
//   - iptables-nft: the nftables ruleset generation id, read around the
//     listing and around each of our writes, must move by exactly the
//     number of commits we made (iptables-nft-restore commits each table
//     section that holds a line, iptables -N / -I once; listings commit
//     nothing). Any other commit in the
//     network namespace (a foreign table, the other family's proxier)
//     shows as a larger move.
//   - iptables-legacy has no generation. The kernel reports each table's
//     blob size, entry count and hook offsets in microseconds
//     (nfgen.LegacyInfo; the drift check trusts the same stamp); hashing
//     the whole blob instead (nfgen.LegacyDigest, counters excluded) costs
//     about half a legacy resync (BenchmarkKernelLegacyDigest), far too
//     much around every partial restore. The stamp must be the
//     recorded one just before each of our restores, and is recorded again
//     just after; the entry count after the restore must equal the count
//     before it plus what our restore adds and deletes (one entry per rule,
//     two per user chain). What goes unseen is a foreign change that keeps
//     a table's byte size and entry count both (a rule replaced in place by
//     one of the same size), or one landing in the instant between our
//     restore and the read that also matches the count. That window is
//     bounded: every legacyVerifyEvery-th resync lists anyway (with the
//     default FullSyncPeriod of an hour, at least every few hours), and
//     the drift check's canaries still catch a flushed table at any time.
//
// A periodic, node-change, engine-chosen or requested full sync (the base
// decides which may trust the last write: engine.Request.Unchanged) that
// finds the proof intact (generation or every table's digest unchanged) skips
// iptables-save and the jump-rule and canary checks, and diffs the full
// render against the carried digests: a fault in the engine's own state
// is still written out. A start, a failure, drift, cleanup, or any doubt
// (no reader, a read error, an unexpected move) lists as before.

// tableWatch is the part of xtables.Runner that tells without listing
// whether our tables changed (see above): the real Runner asks the kernel
// for its backend's generation or table info; iptablestest.Fake models
// both (Fake.SetTableWatch).
type tableWatch interface {
	TableGeneration() (gen uint32, ok bool, err error)
	TableDigest(table xtables.Table) (d xtables.TableDigest, ok bool, err error)
	TableChainNames(table xtables.Table) (names []string, ok bool, err error)
}

// legacyVerifyEvery: with a TableDigest proof (legacy), every this many
// full resyncs one lists anyway, bounding what a digest cannot see.
const legacyVerifyEvery = 4

// resyncState is the proof, kept across syncs.
type resyncState struct {
	// watch is the Runner the engine was built with (not a writeCounter
	// wrapped around it for one restore).
	watch tableWatch
	// known: nat and filter chain digests as the kernel holds them (nil:
	// unknown).
	known map[xtables.Table]tableSums
	// nft: custody of the generation; legacy: the digests of canaryTables.
	custody nfgen.Custody
	digests map[xtables.Table]xtables.TableDigest
	// skips counts the resyncs skipped since the last listing (legacy).
	skips int
}

func (p *Proxier) resyncWatch() tableWatch {
	rs := &p.resync
	if rs.watch == nil {
		rs.watch = p.ipt
	}
	return rs.watch
}

// lose forgets the proof: the next full sync lists.
func (rs *resyncState) lose() {
	rs.known, rs.digests = nil, nil
	rs.custody.Lose()
}

// lastWriteHolds is the Unchanged hook: the tables are as our last write
// left them (see above). engine.Request.Unchanged asks it only for a full
// sync whose reason allows skipping the listing.
func (p *Proxier) lastWriteHolds(*engine.Request) bool {
	return p.wrote && p.resync.known != nil && p.unchanged(p.resyncWatch())
}

// ensureBaseOrSkip is ensureBase (list, check jump rules and canaries), or
// nothing at all when the proof says the tables are as we left them; then
// p.kernel is the carried digest. It returns the nat chains the kernel has
// (nil when unknown).
func (p *Proxier) ensureBaseOrSkip(ctx context.Context, req *engine.Request) (tableSums, error) {
	rs := &p.resync
	if req.Unchanged() {
		p.log.V(2).Info("Full sync: the tables are as our last write left them; not listing them", "reason", req.Reason)
		p.kernel = rs.known
		rs.skips++
		return rs.known[xtables.TableNAT], nil
	}
	w := p.resyncWatch()
	rs.skips = 0
	// Bracket the listing and the commands ensureBase may run.
	rs.lose()
	gen0, genOK, err0 := w.TableGeneration()
	d0, dOK := p.readDigests(w, canaryTables)
	orig := p.ipt
	wc := &writeCounter{Runner: orig, restoreLines: true, chains: map[xtables.Table]int{}, rules: map[xtables.Table]int{}}
	p.ipt = wc
	existing, err := p.ensureBase(ctx)
	p.ipt = orig
	if err != nil || p.kernel == nil || p.kernel[xtables.TableNAT] == nil || p.kernel[xtables.TableFilter] == nil || wc.other {
		return existing, err
	}
	known := map[xtables.Table]tableSums{xtables.TableNAT: p.kernel[xtables.TableNAT], xtables.TableFilter: p.kernel[xtables.TableFilter]}
	listed := map[xtables.Table]int{}
	for t, k := range known {
		listed[t] = tableEntries(t, k)
	}
	// What ensureBase's commands added after the listing: empty chains,
	// and rules in built-in chains (only counted: the payloads never
	// declare those chains).
	for _, tc := range wc.created {
		if k := known[tc.table]; k != nil && k[string(tc.chain)] == nil {
			k[string(tc.chain)] = &chainSum{name: p.diff.lineHash([]byte(tc.chain))}
		}
	}
	for _, tc := range wc.inserted {
		if k := known[tc.table]; k != nil {
			if s := k[string(tc.chain)]; s != nil {
				s.n++
				s.h = mix(s.h + 1)
				s.rawOK = false
			}
		}
	}
	switch {
	case genOK && err0 == nil:
		gen1, ok, err := w.TableGeneration()
		if err != nil || !ok {
			return existing, nil
		}
		rs.custody.Verified(gen0)
		if rs.custody.CommittedN(gen0, gen1, wc.writes()) {
			rs.known = known
		}
	case dOK:
		d1, ok := p.readDigests(w, canaryTables)
		if !ok {
			return existing, nil
		}
		for _, t := range canaryTables {
			added := uint32(2*wc.chains[t] + wc.rules[t])
			if d1[t].Entries != d0[t].Entries+added || (added == 0 && d1[t] != d0[t]) {
				return existing, nil
			}
			if n, ok := listed[t]; ok && n != int(d0[t].Entries) {
				// The listing does not describe the blob we read.
				p.log.V(2).Info("Table listing and blob disagree; the next full sync lists again", "table", t)
				return existing, nil
			}
		}
		rs.digests, rs.known = d1, known
	}
	return existing, nil
}

// unchanged reports whether the tables are as the proof says.
func (p *Proxier) unchanged(w tableWatch) bool {
	rs := &p.resync
	if g, ok, err := w.TableGeneration(); err != nil {
		return false
	} else if ok {
		return rs.custody.Unchanged(g)
	}
	if rs.digests == nil || rs.skips+1 >= legacyVerifyEvery {
		return false
	}
	d, ok := p.readDigests(w, canaryTables)
	if !ok {
		return false
	}
	for _, t := range canaryTables {
		if d[t] != rs.digests[t] {
			return false
		}
	}
	// A writer that ignores the xtables lock may write back a stale copy
	// of a table with the size, entry count and hook offsets of ours (a
	// KUBE-SEP chain we deleted put back, the one we added gone): the
	// digest does not see it, the chain names do. What keeps every name
	// too (rules changed in place, same sizes) is left to the listing
	// every legacyVerifyEvery-th resync makes. A Runner that cannot read
	// the names (ok false) proves nothing: list.
	for _, t := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		names, ok, err := w.TableChainNames(t)
		if err != nil || !ok || !sameChainNames(names, rs.known[t]) {
			p.log.Info("The table's chains are not the ones our last write left (another writer?); listing it", "table", t)
			return false
		}
	}
	return true
}

// sameChainNames reports whether names are exactly the chains of sums.
func sameChainNames(names []string, sums tableSums) bool {
	if len(names) != len(sums) {
		return false
	}
	for _, n := range names {
		if sums[n] == nil {
			return false
		}
	}
	return true
}

func (p *Proxier) readDigests(w tableWatch, tables []xtables.Table) (map[xtables.Table]xtables.TableDigest, bool) {
	out := make(map[xtables.Table]xtables.TableDigest, len(tables))
	for _, t := range tables {
		d, ok, err := w.TableDigest(t)
		if err != nil || !ok {
			return nil, false
		}
		out[t] = d
	}
	return out, true
}

// restoreTracked is restore, carrying the proof through it: the digests
// of what the payload writes are applied to the known ones, and the
// generation or the tables' digests checked around it.
func (p *Proxier) restoreTracked(ctx context.Context, payload restorePayload, full bool) error {
	rs := &p.resync
	w := p.resyncWatch()
	if rs.known == nil {
		return p.restore(ctx, payload, full)
	}
	gen0, genOK, _ := w.TableGeneration()
	written := []xtables.Table{xtables.TableNAT, xtables.TableFilter}
	var d0 map[xtables.Table]xtables.TableDigest
	if !genOK {
		var ok bool
		if d0, ok = p.readDigests(w, written); !ok || d0[xtables.TableNAT] != rs.digests[xtables.TableNAT] || d0[xtables.TableFilter] != rs.digests[xtables.TableFilter] {
			rs.lose()
			return p.restore(ctx, payload, full)
		}
	}
	orig := p.ipt
	wc := &writeCounter{Runner: orig, chains: map[xtables.Table]int{}, rules: map[xtables.Table]int{}}
	p.ipt = wc
	err := p.restore(ctx, payload, full)
	p.ipt = orig
	if err != nil || wc.other {
		rs.lose()
		return err
	}
	before := map[xtables.Table]int{}
	for _, t := range written {
		before[t] = tableEntries(t, rs.known[t])
	}
	if !applyPayload(rs.known, payload, &p.diff) {
		rs.lose()
		return nil
	}
	if genOK {
		gen1, ok, err := w.TableGeneration()
		if err != nil || !ok || !rs.custody.CommittedN(gen0, gen1, wc.writes()) {
			rs.lose()
		}
		return nil
	}
	d1, ok := p.readDigests(w, written)
	if !ok {
		rs.lose()
		return nil
	}
	for _, t := range written {
		after := tableEntries(t, rs.known[t])
		if before[t] < 0 || after < 0 || int(d1[t].Entries) != int(d0[t].Entries)+after-before[t] {
			rs.lose()
			return nil
		}
		rs.digests[t] = d1[t]
	}
	return nil
}

// builtinChainNames are the built-in chains of the tables we digest.
var builtinChainNames = map[xtables.Table][]string{
	xtables.TableNAT:    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	xtables.TableFilter: {"INPUT", "FORWARD", "OUTPUT"},
	xtables.TableMangle: {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
}

// tableEntries counts the entries a legacy blob holds for the chains of
// sums (-1 when a chain's rule count is unknown).
func tableEntries(t xtables.Table, sums tableSums) int {
	builtin := map[string]bool{}
	for _, c := range builtinChainNames[t] {
		builtin[c] = true
	}
	n := 1
	for name, s := range sums {
		if s.n < 0 {
			return -1
		}
		n += s.n + 2
		if builtin[name] {
			n--
		}
	}
	return n
}

// applyPayload applies an iptables-restore --noflush payload to the chain
// digests: a declared chain is flushed, -A appends, -I inserts and -D
// deletes (the shared dispatch chains, whose digest is a multiset), -X
// deletes the chain. A chain the payload declares and fills gets the raw
// hash of its lines and no normal form (lazy), except the shared chains,
// whose digest later -I and -D lines must follow: rules are normalised
// only for those (a cold start at 10,000 services writes 434,000 lines).
// It reads the payload's ops (ops.go) for what each line is. It reports
// false for a line it cannot follow (the digests are then not to be
// trusted).
func applyPayload(known map[xtables.Table]tableSums, pl restorePayload, d *chainDiffer) bool {
	var sums tableSums
	var table xtables.Table
	var slab []chainSum
	var cur []byte
	var cs *chainSum
	var unordered, tailLast bool
	pos := 0
	for _, o := range pl.ops {
		line := pl.text[pos : o.End-1]
		pos = int(o.End)
		switch {
		case o.Kind == opOther && (len(line) == 0 || line[0] == '#'):
		case o.Kind == opTable:
			table = sectionTable(line, o)
			sums, cs = known[table], nil
			if sums == nil {
				return false
			}
		case o.Kind == opCommit:
			sums, cs = nil, nil
		case sums == nil:
			return false
		case o.Kind == opDeclare:
			name := opName(line, o)
			u, _ := unorderedChain(table, name)
			s := sums[string(name)]
			if s == nil {
				// New chains (110,000 on a cold start) from one slab.
				if len(slab) == cap(slab) {
					slab = make([]chainSum, 0, 1024)
				}
				slab = slab[:len(slab)+1]
				s = &slab[len(slab)-1]
				sums[string(name)] = s
			}
			*s = chainSum{raw: rawStart, rawOK: true, lazy: !u, name: d.lineHash(name)}
			if cs == s {
				cs = nil
			}
		case o.Kind == opDeleteChain:
			delete(sums, string(opName(line, o)))
			cs = nil
		case o.Kind == opAppend || o.Kind == opInsert || o.Kind == opDelete:
			chain := opName(line, o)
			if cs == nil || !bytes.Equal(chain, cur) {
				if cs = sums[string(chain)]; cs == nil {
					return false
				}
				cur = chain
				unordered, tailLast = unorderedChain(table, chain)
			}
			s := cs
			switch {
			case o.Kind == opAppend:
				if s.lazy {
					s.n++
				} else {
					s.add(ruleHash(opSpec(line, o)), unordered)
				}
				if s.rawOK {
					s.raw = rawStep(s.raw, d.lineHash(line))
				}
			case o.Kind == opInsert && unordered && !s.lazy:
				rh := ruleHash(opSpec(line, o))
				s.h += mix(rh)
				s.n++
				if s.n == 1 {
					s.last = rh
				}
				s.rawOK = false
			case o.Kind == opDelete && unordered && !s.lazy && s.n > 0:
				rh := ruleHash(opSpec(line, o))
				if tailLast && rh == s.last {
					return false
				}
				s.h -= mix(rh)
				s.n--
				s.rawOK = false
			default:
				return false
			}
		default:
			return false
		}
	}
	return true
}

// writeCounter counts the commits of the writes made through it: one per
// table section a restore writes (iptables-nft-restore commits each), per
// chain created and per rule inserted by a command; it also notes, per
// table, the chains created and rules added (by a command, or by the -N
// and -I/-A lines of a restore when restoreLines: ensureBase's small
// restore). Other writes (unknown effect) set other.
type writeCounter struct {
	xtables.Runner
	commits           int
	restoreLines      bool
	chains, rules     map[xtables.Table]int
	created, inserted []tableChain
	other             bool
}

type tableChain struct {
	table xtables.Table
	chain xtables.Chain
}

func (w *writeCounter) writes() int { return w.commits }

func (w *writeCounter) Restore(ctx context.Context, in xtables.RestoreInput) error {
	err := w.Runner.Restore(ctx, in)
	if err != nil {
		w.other = true
		return err
	}
	w.commits += xtables.SectionsWithCommands(in.Text)
	if w.restoreLines {
		w.noteRestored(in.Text)
	}
	return nil
}

// noteRestored notes the chains and rules a restore of -N, -I and -A
// lines added.
func (w *writeCounter) noteRestored(data []byte) {
	var table xtables.Table
	sc := lines.New(data)
	for sc.Scan() {
		switch line := sc.Line(); {
		case len(line) == 0 || line[0] == '#' || bytes.Equal(line, []byte("COMMIT")):
		case line[0] == '*':
			table = xtables.Table(line[1:])
		case len(line) > 3 && line[0] == '-' && line[2] == ' ':
			chain, _ := splitChain(line[3:])
			tc := tableChain{table, xtables.Chain(chain)}
			switch line[1] {
			case 'N':
				w.chains[table]++
				w.created = append(w.created, tc)
			case 'I', 'A':
				w.rules[table]++
				w.inserted = append(w.inserted, tc)
			default:
				w.other = true
			}
		default:
			w.other = true
		}
	}
}

func (w *writeCounter) EnsureChain(ctx context.Context, table xtables.Table, chain xtables.Chain) (bool, error) {
	existed, err := w.Runner.EnsureChain(ctx, table, chain)
	if err != nil {
		w.other = true
	} else if !existed {
		w.commits++
		w.chains[table]++
		w.created = append(w.created, tableChain{table, chain})
	}
	return existed, err
}

func (w *writeCounter) EnsureRule(ctx context.Context, pos xtables.RulePosition, table xtables.Table, chain xtables.Chain, args ...string) (bool, error) {
	existed, err := w.Runner.EnsureRule(ctx, pos, table, chain, args...)
	if err != nil {
		w.other = true
	} else if !existed {
		w.commits++
		w.rules[table]++
		w.inserted = append(w.inserted, tableChain{table, chain})
	}
	return existed, err
}

func (w *writeCounter) FlushChain(ctx context.Context, table xtables.Table, chain xtables.Chain) error {
	w.other = true
	return w.Runner.FlushChain(ctx, table, chain)
}

func (w *writeCounter) DeleteChain(ctx context.Context, table xtables.Table, chain xtables.Chain) error {
	w.other = true
	return w.Runner.DeleteChain(ctx, table, chain)
}

func (w *writeCounter) DeleteRule(ctx context.Context, table xtables.Table, chain xtables.Chain, args ...string) error {
	w.other = true
	return w.Runner.DeleteRule(ctx, table, chain, args...)
}
