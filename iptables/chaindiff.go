package iptables

import (
	"bytes"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"math"
	"strconv"
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

// chainSum is the digest of one chain's rules.
type chainSum struct {
	h    uint64
	n    int
	last uint64
	skip bool // reducePayload: the kernel holds this chain as declared
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
func sumListing(data []byte, table xtables.Table) tableSums {
	sums := tableSums{}
	var cur []byte
	var cs *chainSum
	var unordered bool
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		switch {
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			if sums[string(name)] == nil {
				sums[string(name)] = &chainSum{}
			}
		case len(line) > 3 && line[0] == '-' && line[1] == 'A' && line[2] == ' ':
			chain, rest := splitChain(line[3:])
			if cs == nil || !bytes.Equal(chain, cur) {
				cur = chain
				cs = sums[string(chain)]
				if cs == nil {
					cs = &chainSum{}
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
// (nil: nothing to write) and how many declared chains were kept and
// skipped.
func reducePayload(payload []byte, kernel map[xtables.Table]tableSums) (out []byte, written, skipped int) {
	// Pass 1: digest the payload's chains, note declarations and deletions.
	type tableInfo struct {
		sums    tableSums
		deleted map[string]bool
	}
	info := map[xtables.Table]*tableInfo{}
	var ti *tableInfo
	var table xtables.Table
	var cur []byte
	var cs *chainSum
	var unordered bool
	// The digests come from one slab (110,000 chains at 10,000 services)
	// and the maps are sized from the kernel's: allocation and map growth
	// were a third of a steady resync's compare.
	var slab []chainSum
	newSum := func() *chainSum {
		if len(slab) == cap(slab) {
			slab = make([]chainSum, 0, 4096)
		}
		slab = slab[:len(slab)+1]
		return &slab[len(slab)-1]
	}
	eachLine(payload, func(line []byte) {
		switch {
		case len(line) > 1 && line[0] == '*':
			table = xtables.Table(line[1:])
			ti = &tableInfo{sums: make(tableSums, len(kernel[table])), deleted: map[string]bool{}}
			info[table] = ti
			cs = nil
		case ti == nil:
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			if ti.sums[string(name)] == nil {
				ti.sums[string(name)] = newSum()
			}
		case len(line) > 3 && line[0] == '-' && line[1] == 'A' && line[2] == ' ':
			chain, rest := splitChain(line[3:])
			if cs == nil || !bytes.Equal(chain, cur) {
				cur = chain
				cs = ti.sums[string(chain)]
				if cs == nil {
					cs = newSum()
					cs.n = -1 // not declared: never skipped
					ti.sums[string(chain)] = cs
				}
				unordered, _ = unorderedChain(table, chain)
			}
			if cs.n >= 0 {
				cs.add(ruleHash(rest), unordered)
			}
		case len(line) > 3 && line[0] == '-' && line[1] == 'X' && line[2] == ' ':
			ti.deleted[string(bytes.TrimSpace(line[3:]))] = true
		}
	})
	// Which declared chains to skip (chainSum.skip).
	for t, ti := range info {
		k := kernel[t]
		if k == nil {
			for _, s := range ti.sums {
				if s.n >= 0 {
					written++
				}
			}
			continue
		}
		for name, s := range ti.sums {
			if s.n < 0 {
				continue
			}
			ks := k[name]
			if ks == nil || s.h != ks.h || s.n != ks.n {
				written++
				continue
			}
			_, tailLast := unorderedChain(t, []byte(name))
			if !ti.deleted[name] && s.same(*ks, tailLast) {
				s.skip = true
				skipped++
			} else {
				written++
			}
		}
	}
	if skipped == 0 {
		return payload, written, 0
	}
	// Pass 2: copy what is kept, in place (the payload only shrinks).
	out = payload[:0]
	var sums tableSums
	// The last chain looked up, copied: pass 2 overwrites the payload.
	var lastChain []byte
	var lastSkip, haveLast bool
	skipChain := func(name []byte) bool {
		if haveLast && bytes.Equal(name, lastChain) {
			return lastSkip
		}
		s := sums[string(name)]
		lastChain, lastSkip, haveLast = append(lastChain[:0], name...), s != nil && s.skip, true
		return lastSkip
	}
	sectionStart, sectionLines := 0, 0
	eachLine(payload, func(line []byte) {
		switch {
		case len(line) > 1 && line[0] == '*':
			sums, haveLast = nil, false
			if ti := info[xtables.Table(line[1:])]; ti != nil && kernel[xtables.Table(line[1:])] != nil {
				sums = ti.sums
			}
			sectionStart, sectionLines = len(out), 0
		case bytes.Equal(line, []byte("COMMIT")):
			if sectionLines == 0 {
				out = out[:sectionStart] // nothing left in this table
				return
			}
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			if skipChain(name) {
				return
			}
			sectionLines++
		case len(line) > 3 && line[0] == '-' && line[1] == 'A' && line[2] == ' ':
			chain, _ := splitChain(line[3:])
			if skipChain(chain) {
				return
			}
			sectionLines++
		default:
			sectionLines++
		}
		// line lies at or after len(out) in the same array: copy is safe.
		out = append(out, line...)
		out = append(out, '\n')
	})
	if len(out) == 0 {
		return nil, written, skipped
	}
	return out, written, skipped
}

// eachLine calls f for each line of data, without its newline. The line
// aliases data.
func eachLine(data []byte, f func([]byte)) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		f(line)
	}
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
