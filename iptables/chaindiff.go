package iptables

import (
	"bytes"
	"hash/maphash"
	"math"
	"strconv"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// A full sync writes only the chains whose content differs from the
// kernel's: the payload is rendered whole (so a sync into an empty table is
// what it always was), then every chain it declares whose rules the kernel
// already holds is dropped from it, declaration and rules. Chains deleted
// with -X stay. A restart over a correct ruleset, or the hourly resync of
// an unchanged one, then costs the listing and no restore at all.
//
// Rules are compared in a normal form that both our rendering and
// iptables-save's (nft and legacy print the same) reduce to: a rule is a
// set of option groups ("-p tcp", "! -s 10.0.0.0/8", "-m comment
// --comment x", "-j DNAT --to-destination ..."), each group a set of
// options, so the order iptables-save reorders them in does not matter;
// values are normalised where the tool prints them differently from how
// they are written (addresses get their /32 or /128, probabilities are the
// kernel's 31-bit fraction, MARK --or-mark/--xor-mark are --set-xmark,
// default options of recent and REJECT are dropped, quotes removed). Each
// normal form is hashed (64-bit); a chain's hash is the ordered sequence of
// its rules' hashes, except for the shared dispatch chains, whose order
// carries no meaning (partial syncs insert into them): there it is the
// multiset, plus the last rule for nat KUBE-SERVICES, whose node-port tail
// rule must stay last. A rule the normal form does not know only costs a
// rewrite of its chain: a false "differs" is safe, and a false "same"
// would need a 64-bit collision.

// chainSum is the digest of one chain's rules as the kernel holds them.
// A chain listed by iptables-save has its normal form (h, last); a chain
// one of our restores declared and filled has the hash of the lines we
// rendered (raw) instead: our render is deterministic, so a later render
// of the same lines is the same chain, and lines that differ are a change
// (at worst a rewrite of an unchanged chain, never a skip of a changed
// one). reducePayload compares raw hashes first and reduces to the normal
// form only the chains whose raw hash is unknown, memoising the raw hash
// of every chain found the same that way.
type chainSum struct {
	// h is the normal form of the rules (ordered sequence, or multiset for
	// the shared dispatch chains), last that of the last rule; both are
	// unknown when lazy.
	h, last uint64
	// raw hashes the rule lines as we rendered them (rawOK).
	raw   uint64
	n     int
	rawOK bool
	lazy  bool
	// seen is the number of the last full render that wants this chain
	// (renderer.seenMark), so that stale chains are found without a set of
	// the wanted ones.
	seen uint32
	// pass and slot: the chain's scratch in the reducePayload call
	// numbered pass (chainDiffer.pass).
	pass uint32
	slot int32
	// name is the chainDiffer.lineHash of the chain's name (0: not set),
	// which checks the render's hints (declHint).
	name uint64
}

func (s *chainSum) add(rh uint64, unordered bool) {
	if unordered {
		s.h += mix(rh)
	} else {
		s.h = mix(s.h ^ rh + 0x9e3779b97f4a7c15)
	}
	s.n++
	s.last = rh
}

func (s chainSum) same(k chainSum, tailLast bool) bool {
	if s.h != k.h || s.n != k.n {
		return false
	}
	return !tailLast || s.last == k.last
}

// rawStart is the raw hash of an empty chain; rawStep adds one line's hash
// (order matters, as it does in the kernel).
const rawStart = 0x243f6a8885a308d3

func rawStep(acc, line uint64) uint64 { return mix(acc^line) + 0x9e3779b97f4a7c15 }

// chainDiffer holds what reducePayload and applyPayload keep across calls:
// the seed of the raw line hashes (maphash, cheap beside the render:
// BenchmarkKernelResync) and the number of the current reducePayload
// call.
type chainDiffer struct {
	seed maphash.Seed
	pass uint32
}

func newChainDiffer() chainDiffer { return chainDiffer{seed: maphash.MakeSeed()} }

func (d *chainDiffer) lineHash(line []byte) uint64 { return maphash.Bytes(d.seed, line) }

// unorderedChain reports whether the order of chain's rules carries no
// meaning (the shared dispatch chains), and whether its last rule must
// stay last.
func unorderedChain(table xtables.Table, chain []byte) (unordered, tailLast bool) {
	for _, sc := range sharedChains {
		if sc.table == table && string(sc.chain) == string(chain) {
			return true, sc.insert
		}
	}
	return false, false
}

// hasServiceChain reports whether a table's digest holds a per-service
// chain.
func hasServiceChain(s tableSums) bool {
	for name := range s {
		if isServiceChain(name) {
			return true
		}
	}
	return false
}

// tableSums digests the chains of one table: an iptables-save listing, or
// the table's section of a payload.
type tableSums map[string]*chainSum

// sumListing digests an iptables-save listing of table.
func sumListing(data []byte, table xtables.Table, d *chainDiffer) tableSums {
	sums := tableSums{}
	var cur []byte
	var cs *chainSum
	var unordered bool
	sc := lines.New(data)
	for sc.Scan() {
		line := sc.Line()
		switch {
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			if sums[string(name)] == nil {
				sums[string(name)] = &chainSum{name: d.lineHash(name)}
			}
		case len(line) > 3 && line[0] == '-' && line[1] == 'A' && line[2] == ' ':
			chain, rest := splitChain(line[3:])
			if cs == nil || !bytes.Equal(chain, cur) {
				cur = chain
				cs = sums[string(chain)]
				if cs == nil {
					cs = &chainSum{name: d.lineHash(chain)}
					sums[string(chain)] = cs
				}
				unordered, _ = unorderedChain(table, chain)
			}
			cs.add(ruleHash(rest), unordered)
		}
	}
	return sums
}

func splitChain(s []byte) (chain, rest []byte) {
	if i := bytes.IndexByte(s, ' '); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, nil
}

// reducePayload drops from a full payload every chain it declares whose
// digest matches the kernel's (kernel: per table, nil when that table was
// not listed, in which case its section is kept whole). Table sections
// left with nothing to do are dropped (with legacy an empty section still
// reloads and re-commits the whole table). It returns the reduced payload
// (empty: nothing to write), its text and ops reduced in place, and how
// many declared chains were kept and skipped. It reads the payload's ops
// (ops.go), not its text, for what each line is.
//
// A steady resync compares the 110,000 chains of 10,000 services, so the
// work per chain is kept to one map lookup (a small cache catches the
// rules that follow their chain's declaration and the shared chains'
// runs) and a hash of its lines; a rule's normal form is computed only
// for a chain whose raw hash the kernel side does not know (after a
// listing).
//
// hints, when not nil, are the render's: the offset in payload of each
// ":" line it wrote for a chain of kernel's nat table, with that chain's
// digest, in payload order (renderer.declHints).
func reducePayload(pl restorePayload, kernel map[xtables.Table]tableSums, d *chainDiffer, hints []declHint) (out restorePayload, written, skipped int) {
	payload := pl.text
	d.pass++
	if d.pass == 0 {
		d.pass = 1
	}
	nchains := 0
	for _, k := range kernel {
		nchains += len(k)
	}
	// Pass 1: the payload as runs of lines (of one chain, or kept as they
	// are), and each of the kernel's chains it names in a slot.
	runs := make([]payloadRun, 0, 3*nchains+64)
	slots := make([]payloadChain, 0, nchains)
	var sums tableSums
	var table xtables.Table
	var cache lookupCache
	section := 0
	slotOfSum := func(s *chainSum, name []byte) int32 {
		if s.pass != d.pass {
			s.pass, s.slot = d.pass, int32(len(slots))
			unordered, tailLast := unorderedChain(table, name)
			slots = append(slots, payloadChain{ks: s, raw: rawStart, unordered: unordered, tailLast: tailLast})
		}
		return s.slot
	}
	// hinted: the digest of the chain declared at pos, when the render
	// said (nil: look it up).
	hinted := func(pos int) *chainSum {
		for len(hints) > 0 && int(hints[0].off) < pos {
			hints = hints[1:]
		}
		if len(hints) > 0 && int(hints[0].off) == pos && table == xtables.TableNAT {
			return hints[0].sum
		}
		return nil
	}
	slotOf := func(name []byte, hint *chainSum) int32 {
		h := d.lineHash(name)
		e := &cache[h%uint64(len(cache))]
		if hint != nil && hint.name != h {
			hint = nil // not the chain the render declared there
		}
		if hint == nil && e.section == section && e.hash == h && bytes.Equal(e.name, name) {
			return e.slot
		}
		slot := int32(-1)
		if hint != nil {
			slot = slotOfSum(hint, name)
		} else if s := sums[string(name)]; s != nil {
			slot = slotOfSum(s, name)
		}
		*e = lookupEntry{section: section, hash: h, name: name, slot: slot}
		return slot
	}
	addRun := func(start, end int, slot int32, kind uint8) {
		if n := len(runs); n > 0 && kind == runLines {
			if r := &runs[n-1]; r.kind == runLines && r.slot == slot && int(r.end) == start {
				r.end = uint32(end)
				return
			}
		}
		runs = append(runs, payloadRun{start: uint32(start), end: uint32(end), slot: slot, kind: kind})
	}
	var curChain []byte
	curSlot := int32(-1)
	inSection := false
	pos := 0
	for _, o := range pl.ops {
		next := int(o.End)
		line := payload[pos : next-1]
		switch {
		case o.Kind == opTable:
			table = sectionTable(line, o)
			sums, inSection = kernel[table], true
			section++
			curChain = nil
			addRun(pos, next, -1, runHeader)
		case o.Kind == opCommit:
			inSection = false
			addRun(pos, next, -1, runCommit)
		case o.Kind == opDeclare:
			slot := int32(-1)
			if sums != nil {
				slot = slotOf(opName(line, o), hinted(pos))
			}
			if slot >= 0 {
				slots[slot].declared = true
			} else if inSection {
				written++ // a chain the kernel lacks, or a table not listed
			}
			addRun(pos, next, slot, runLines)
		case sums != nil && o.Kind == opAppend:
			chain := opName(line, o)
			if curChain == nil || !bytes.Equal(chain, curChain) {
				curChain, curSlot = chain, slotOf(chain, nil)
			}
			if curSlot >= 0 {
				sl := &slots[curSlot]
				sl.n++
				sl.raw = rawStep(sl.raw, d.lineHash(line))
			}
			addRun(pos, next, curSlot, runLines)
		case sums != nil && o.Kind == opDeleteChain:
			if slot := slotOf(opName(line, o), nil); slot >= 0 {
				slots[slot].deleted = true
			}
			addRun(pos, next, -1, runLines)
		default:
			addRun(pos, next, -1, runLines)
		}
		pos = next
	}
	// Which declared chains the kernel holds as rendered: by raw hash, or
	// else (a listed chain) by normal form, computed only for those.
	needNorm := false
	for i := range slots {
		sl := &slots[i]
		ks := sl.ks
		switch {
		case !sl.declared:
		case sl.deleted:
			written++
		case ks.rawOK && sl.raw == ks.raw && sl.n == ks.n:
			sl.skip = true
			skipped++
		case ks.lazy || sl.n != ks.n:
			written++
		default:
			sl.norm, needNorm = true, true
		}
	}
	if needNorm {
		// The runs and the ops are both in payload order: one cursor
		// walks the ops of each run.
		oi, pos := 0, 0
		for _, r := range runs {
			for oi < len(pl.ops) && pl.ops[oi].End <= r.start {
				pos = int(pl.ops[oi].End)
				oi++
			}
			if r.slot < 0 || !slots[r.slot].norm {
				continue
			}
			sl := &slots[r.slot]
			for oi < len(pl.ops) && pl.ops[oi].End <= r.end {
				o := pl.ops[oi]
				if o.Kind == opAppend {
					sl.normSum.add(ruleHash(opSpec(payload[pos:o.End-1], o)), sl.unordered)
				}
				pos = int(o.End)
				oi++
			}
		}
		for i := range slots {
			sl := &slots[i]
			if !sl.norm {
				continue
			}
			ks := sl.ks
			if sl.normSum.same(*ks, sl.tailLast) {
				sl.skip = true
				skipped++
				ks.raw, ks.rawOK = sl.raw, true // memoised for the next resync
			} else {
				written++
			}
		}
	}
	if skipped == 0 {
		return pl, written, 0
	}
	// Pass 2: copy what is kept, text and ops, in place (the payload only
	// shrinks).
	text, ops := payload[:0], pl.ops[:0]
	sectionStart, sectionOps, sectionLines := 0, 0, 0
	oi := 0
	for _, r := range runs {
		// The run's ops: those ending in (r.start, r.end].
		first := oi
		for oi < len(pl.ops) && pl.ops[oi].End <= r.end {
			oi++
		}
		switch r.kind {
		case runHeader:
			sectionStart, sectionOps, sectionLines = len(text), len(ops), 0
		case runCommit:
			if sectionLines == 0 {
				// Nothing left in this table.
				text, ops = text[:sectionStart], ops[:sectionOps]
				continue
			}
		default:
			if r.slot >= 0 && slots[r.slot].skip {
				continue
			}
			sectionLines++
		}
		// The run lies at or after len(text) in the same array, its ops
		// at or after len(ops): copy is safe.
		shift := r.start - uint32(len(text))
		text = append(text, payload[r.start:r.end]...)
		for _, o := range pl.ops[first:oi] {
			o.End -= shift
			ops = append(ops, o)
		}
	}
	if len(text) == 0 {
		return restorePayload{}, written, skipped
	}
	return restorePayload{text: text, ops: ops}, written, skipped
}

// declHint is where a full render declared a chain the kernel has, with
// its digest.
type declHint struct {
	off uint32
	sum *chainSum
}

// payloadRun is a run of consecutive payload lines: of one chain in the
// kernel's digest (slot >= 0), or kept as they are (slot -1).
type payloadRun struct {
	start, end uint32
	slot       int32
	kind       uint8
}

const (
	runLines uint8 = iota
	runHeader
	runCommit
)

// payloadChain is reducePayload's view of one kernel chain the payload
// names: the payload's version of it (raw hash, and its normal form when
// norm) and what to do with it.
type payloadChain struct {
	ks      *chainSum
	n       int
	raw     uint64
	normSum chainSum
	// unordered, tailLast: as unorderedChain says of it.
	declared, deleted, unordered, tailLast, norm, skip bool
}

// lookupCache remembers recent chain lookups of reducePayload: a chain's
// rules follow its declaration a few lines later, and the shared chains
// recur between the services' own.
type lookupCache [256]lookupEntry

type lookupEntry struct {
	section int
	hash    uint64
	name    []byte
	slot    int32
}

// ruleHash hashes the normal form of one rule's matches and target (the
// text after "-A CHAIN ").
func ruleHash(rule []byte) uint64 {
	var toks [64][]byte
	n := 0
	// Tokenise (quotes removed).
	for i := 0; i < len(rule) && n < len(toks); {
		for i < len(rule) && rule[i] == ' ' {
			i++
		}
		if i >= len(rule) {
			break
		}
		if rule[i] == '"' {
			j := i + 1
			for j < len(rule) && (rule[j] != '"' || rule[j-1] == '\\') {
				j++
			}
			toks[n] = rule[i+1 : min(j, len(rule))]
			n++
			i = j + 1
			continue
		}
		j := i
		for j < len(rule) && rule[j] != ' ' {
			j++
		}
		toks[n] = rule[i:j]
		n++
		i = j
	}
	if n == len(toks) {
		return fnv(rule) // too long to normalise: its text
	}
	t := toks[:n]
	// Groups: top-level options, and matches/targets with their options.
	// An option ("--x") belongs to the last match or target named before
	// it, even after top-level options (we write "-m tcp -p tcp -d IP
	// --dport N"; iptables-save prints "-d IP/32 -p tcp -m tcp --dport N").
	type group struct {
		head, subs uint64
		name       []byte
	}
	var gs [32]group
	ng, last := 0, -1
	for i := 0; i < len(t) && ng < len(gs); {
		neg := false
		if string(t[i]) == "!" && i+1 < len(t) {
			neg = true
			i++
		}
		opt := t[i]
		i++
		k := i
		for k < len(t) && !(len(t[k]) > 1 && t[k][0] == '-') && string(t[k]) != "!" {
			k++
		}
		vals := t[i:k]
		i = k
		switch {
		case len(opt) > 2 && opt[0] == '-' && opt[1] == '-':
			if last < 0 {
				gs[ng] = group{head: mix(fnv(opt) ^ boolBit(neg))}
				for _, v := range vals {
					gs[ng].head = fnvAdd(gs[ng].head, v)
				}
				ng++
				continue
			}
			if h, keep := subHash(gs[last].name, opt, vals); keep {
				gs[last].subs += mix(h ^ boolBit(neg))
			}
		case string(opt) == "-m" || string(opt) == "-j" || string(opt) == "-g":
			var name []byte
			if len(vals) > 0 {
				name = vals[0]
			}
			gs[ng] = group{head: fnvAdd(fnv(opt), name), name: name}
			last = ng
			ng++
		case string(opt) == "-s" || string(opt) == "-d":
			h := fnv(opt)
			for _, v := range vals {
				if bytes.IndexByte(v, '/') < 0 {
					var buf [64]byte
					b := append(buf[:0], v...)
					if bytes.IndexByte(v, ':') >= 0 {
						b = append(b, "/128"...)
					} else {
						b = append(b, "/32"...)
					}
					v = b
				}
				h = fnvAdd(h, v)
			}
			gs[ng] = group{head: mix(h ^ boolBit(neg))}
			ng++
		default:
			h := fnv(opt)
			for _, v := range vals {
				h = fnvAdd(h, v)
			}
			gs[ng] = group{head: mix(h ^ boolBit(neg))}
			ng++
		}
	}
	if ng == len(gs) {
		return fnv(rule)
	}
	var rh uint64
	for _, g := range gs[:ng] {
		rh += mix(g.head ^ g.subs)
	}
	return mix(rh + uint64(ng))
}

// subHash hashes one option of a match or target (name) with its values,
// in normal form; keep is false for options that are the default, which
// iptables-save prints and our rules leave out.
func subHash(name, sub []byte, vals [][]byte) (uint64, bool) {
	h := fnv(sub)
	switch string(name) {
	case "statistic":
		if string(sub) == "--probability" && len(vals) == 1 {
			if f, err := strconv.ParseFloat(string(vals[0]), 64); err == nil {
				q := uint64(uint32(math.Round(f * 0x80000000)))
				return fnvAdd(h, strconv.AppendUint(nil, q, 10)), true
			}
		}
	case "recent":
		switch string(sub) {
		case "--rsource":
			return 0, false
		case "--mask":
			if len(vals) == 1 && (string(vals[0]) == "255.255.255.255" || string(vals[0]) == "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") {
				return 0, false
			}
		}
	case "REJECT":
		if string(sub) == "--reject-with" && len(vals) == 1 && (string(vals[0]) == "icmp-port-unreachable" || string(vals[0]) == "icmp6-port-unreachable") {
			return 0, false
		}
	case "MARK":
		if len(vals) == 1 && bytes.IndexByte(vals[0], '/') < 0 {
			v := vals[0]
			var mask []byte
			switch string(sub) {
			case "--or-mark":
				mask = v
			case "--xor-mark":
				mask = []byte("0x0")
			case "--set-mark", "--set-xmark":
				mask = []byte("0xffffffff")
			}
			if mask != nil {
				var buf [64]byte
				b := append(append(append(buf[:0], v...), '/'), mask...)
				return fnvAdd(fnv([]byte("--set-xmark")), b), true
			}
		}
	}
	for _, v := range vals {
		h = fnvAdd(h, v)
	}
	return h, true
}

func boolBit(b bool) uint64 {
	if b {
		return 0x5bd1e9955bd1e995
	}
	return 0
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv(b []byte) uint64 { return fnvAdd(fnvOffset, b) }

// fnvAdd continues an FNV-1a hash with b and a separator.
func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h ^= 0xff
	h *= fnvPrime
	return h
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
