package xtblob

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// ErrMismatch is matched (errors.Is) by Verify's error when a chain does
// not read back as the input wrote it.
var ErrMismatch = errors.New("xtblob: the kernel does not hold what the input wrote")

// MismatchError names the chains Verify found different (errors.Is
// ErrMismatch).
type MismatchError struct {
	// Chains are "table/chain: what differs", sorted.
	Chains []string
}

func (e *MismatchError) Error() string {
	const show = 5
	c := e.Chains
	more := ""
	if len(c) > show {
		more = fmt.Sprintf(" (and %d more)", len(c)-show)
		c = c[:show]
	}
	return fmt.Sprintf("xtblob: %d chains do not read back as written: %s%s", len(e.Chains), strings.Join(c, "; "), more)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// checkedChains returns, per table of the plan, the user chains the input
// declares (":CHAIN"), whose whole content the input gives (--noflush
// flushes a declared chain), minus those it deletes; a table whose input
// flushes or deletes every chain (-F, -X without a chain) is left out.
func (p *plan) checkedChains() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	all := map[string]bool{} // tables whose every chain is flushed or deleted
	cur := ""
	for i := range p.ops {
		o := &p.ops[i]
		switch o.kind {
		case opTable:
			cur = p.str(o.arg)
			if out[cur] == nil {
				out[cur] = map[string]bool{}
			}
		case opCommit:
			cur = ""
		case opChain, opNewChain:
			if cur != "" && !isBuiltinName(p.str(o.chain)) {
				out[cur][p.str(o.chain)] = true
			}
		case opDeleteChain, opFlush:
			switch {
			case cur == "":
			case o.chain.n == 0:
				all[cur] = true
			case o.kind == opDeleteChain:
				delete(out[cur], p.str(o.chain))
			}
		}
	}
	for t, m := range out {
		if all[t] || len(m) == 0 {
			delete(out, t)
		}
	}
	return out
}

// appendOnly returns, per table and checked chain, the rules (indexes in
// p.encs) the chain holds after the input, when the input changes it
// only by declaring it and appending to it (the engines' inputs, and every
// iptables-save listing); simple is false otherwise.
func (p *plan) appendOnly(chains map[string]map[string]bool) (rules map[string]map[string][]int32, simple bool) {
	rules = map[string]map[string][]int32{}
	cur, set := "", map[string]bool(nil)
	for i := range p.ops {
		o := &p.ops[i]
		switch o.kind {
		case opTable:
			cur = p.str(o.arg)
			set = chains[cur]
			if set != nil && rules[cur] == nil {
				rules[cur] = map[string][]int32{}
			}
			continue
		case opCommit:
			cur, set = "", nil
			continue
		}
		if set == nil || !set[p.str(o.chain)] {
			continue
		}
		c := p.str(o.chain)
		switch o.kind {
		case opChain, opNewChain:
			rules[cur][c] = []int32{}
		case opAppend:
			if _, ok := rules[cur][c]; ok {
				rules[cur][c] = append(rules[cur][c], o.enc)
			}
		default:
			return nil, false
		}
	}
	return rules, true
}

// isBuiltinName: the built-in chains of the tables (policies, never
// flushed by a declaration).
func isBuiltinName(s string) bool {
	switch s {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// chainInput is the part of an input (or of an iptables-save listing)
// that makes the chains of each table in want: the table headers, the
// declarations of those chains, the lines that change them, COMMIT. The
// declarations of every chain named (as a jump target) are kept too, so
// that the rules encode.
func chainInput(data []byte, want map[string]map[string]bool) []byte {
	var out bytes.Buffer
	var cur map[string]bool
	in := false
	sc := lines.New(data)
	for sc.Scan() {
		l := sc.Line()
		switch {
		case len(l) == 0 || l[0] == '#':
		case l[0] == '*':
			name, _ := field(l[1:])
			cur, in = want[string(name)], want[string(name)] != nil
			if in {
				out.Write(l)
				out.WriteByte('\n')
			}
		case !in:
		case string(l) == "COMMIT":
			out.WriteString("COMMIT\n")
			in = false
		case l[0] == ':':
			name, _ := field(l[1:])
			if cur[string(name)] {
				out.Write(l)
				out.WriteByte('\n')
			}
		default:
			cmd, rest := field(l)
			chain, _ := field(rest)
			switch string(cmd) {
			case "-A", "--append", "-I", "--insert", "-D", "--delete", "-R", "--replace", "-F", "--flush", "-N", "--new-chain":
				if cur[string(chain)] {
					out.Write(l)
					out.WriteByte('\n')
				}
			}
		}
	}
	return out.Bytes()
}

// sameEntry reports whether rule a of table ta and rule b of table tb are
// the same entry (counters and the kernel's own fields aside; jumps by the
// name of the chain they go to), as sameRule compares them within one
// table.
//
// listed: b was encoded from the tool's listing, which does not round-trip
// every byte (listingQuirks).
func sameEntry(ta *table, a *tableRule, tb *table, b *tableRule, listed bool) bool {
	if a.size != b.size || a.kind != b.kind {
		return false
	}
	ea, eb := ta.entry(a), tb.entry(b)
	if !sameHead(ta.lay, ta.fam, ea, eb, listed) {
		return false
	}
	to := u16(ea[ta.lay.targetOffsetAt:])
	switch a.kind {
	case kindJump:
		return ta.chains[a.jump].name == tb.chains[b.jump].name
	case kindFallthrough:
		return true
	case kindStandard:
		return i32(ea[to+targetHeader:]) == i32(eb[to+targetHeader:])
	}
	return bytes.Equal(ea[to:], eb[to:])
}

// sameHead compares two entries of the same size up to their target: the
// head (counters and the kernel's fields aside) and the matches.
func sameHead(lay *entryLayout, fam Family, ea, eb []byte, listed bool) bool {
	if !bytes.Equal(ea[:lay.comefromAt], eb[:lay.comefromAt]) {
		return false
	}
	to := u16(ea[lay.targetOffsetAt:])
	if listed {
		return sameMatchesListed(fam, ea[lay.entrySize:to], eb[lay.entrySize:to])
	}
	return bytes.Equal(ea[lay.entrySize:to], eb[lay.entrySize:to])
}

// sameMatchesListed compares the matches of two entries, one encoded from
// the tool's listing, minus what iptables itself does not round-trip: the
// recent match of IPv4 is initialised with a 16-byte mask of ones, and
// iptables-save prints it as "--mask 255.255.255.255", which sets the
// first 4 bytes and clears the other 12 (which IPv4 never reads).
func sameMatchesListed(fam Family, a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for len(a) >= extHeader {
		n := u16(a)
		if n < extHeader || n > len(a) || u16(b) != n {
			return bytes.Equal(a, b)
		}
		ma, mb := a[:n], b[:n]
		if fam == IPv4 && cstring(ma[2:31]) == "recent" && n >= extHeader+228 {
			d := extHeader
			if !bytes.Equal(ma[:d+212+4], mb[:d+212+4]) || !bytes.Equal(ma[d+228:], mb[d+228:]) {
				return false
			}
		} else if !bytes.Equal(ma, mb) {
			return false
		}
		a, b = a[n:], b[n:]
	}
	return bytes.Equal(a, b)
}

// diffChain says how chain name differs between got and want ("" when it
// does not).
func diffChain(got, want *table, name string, listed bool) string {
	gi, gok := got.lookup(name)
	wi, wok := want.lookup(name)
	switch {
	case !gok && !wok:
		return ""
	case !gok:
		return "missing"
	case !wok:
		return "present, not expected"
	}
	gc, wc := &got.chains[gi], &want.chains[wi]
	if gc.n != wc.n {
		return fmt.Sprintf("%d rules, expected %d", gc.n, wc.n)
	}
	for n, g, w := 1, gc.first, wc.first; g >= 0 && w >= 0; n, g, w = n+1, got.rules[g].next, want.rules[w].next {
		if !sameEntry(got, &got.rules[g], want, &want.rules[w], listed) {
			return fmt.Sprintf("rule %d differs", n)
		}
	}
	return ""
}

// compareTables adds to diffs the checked chains that differ between got
// and want, labelled with what.
func compareTables(diffs *[]string, what string, got, want map[string]*table, chains map[string]map[string]bool, listed bool) {
	for tname, set := range chains {
		g, w := got[tname], want[tname]
		if g == nil || w == nil {
			continue
		}
		for c := range set {
			if d := diffChain(g, w, c, listed); d != "" {
				*diffs = append(*diffs, fmt.Sprintf("%s/%s: %s (%s)", tname, c, d, what))
			}
		}
	}
	sort.Strings(*diffs)
}
