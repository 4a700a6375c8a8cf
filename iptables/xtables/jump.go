package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// JumpRule is a rule in a built-in chain that enters one of ours, e.g.
// "-A PREROUTING -m comment --comment "kubernetes service portals" -j
// KUBE-SERVICES" in nat. Every engine hooks its chains in with a list of
// these and installs them with EnsureJumpRules.
type JumpRule struct {
	Table Table
	// From is the (built-in) chain the rule is in; To the chain it jumps to.
	From, To Chain
	// Comment is the rule's -m comment text (kube-proxy's, so that either
	// can clean up after the other); empty: no comment match.
	Comment string
	// Match is written before the comment ("-m conntrack --ctstate NEW",
	// "-m addrtype --dst-type LOCAL"); may be empty.
	Match []string
}

// Args returns the rule as iptables arguments after the chain name:
// Match, the comment (none when Comment is empty), and "-j To".
func (j JumpRule) Args() []string {
	args := make([]string, 0, len(j.Match)+6)
	args = append(args, j.Match...)
	if j.Comment != "" {
		args = append(args, "-m", "comment", "--comment", j.Comment)
	}
	return append(args, "-j", string(j.To))
}

// saveLine is the rule as iptables-save prints it, without the newline.
func (j JumpRule) saveLine() string {
	return string(j.appendLine(nil, "-A "))
}

// appendLine appends the rule as a restore line after op ("-A ", "-I "
// with the chain and position following): From, then its arguments,
// quoted where they hold a space.
func (j JumpRule) appendLine(b []byte, op string) []byte {
	b = append(b, op...)
	b = append(b, j.From...)
	if op == "-I " {
		b = append(b, " 1"...)
	}
	for _, a := range j.Args() {
		b = append(b, ' ')
		if strings.IndexByte(a, ' ') >= 0 {
			b = append(b, '"')
			b = append(b, a...)
			b = append(b, '"')
		} else {
			b = append(b, a...)
		}
	}
	return b
}

// Listing is what EnsureJumpRules needs to know of one table: the chains
// it declares, and the rules of the chains jump rules start from (built-in
// chains, which are short). ParseListing reads it from iptables-save
// output in one pass.
type Listing struct {
	Table  Table
	Chains map[Chain]struct{}
	rules  map[string]struct{}
}

// ParseListing reads the iptables-save output of table, keeping the
// chains it declares and the rules ("-A CHAIN ...") of the chains named in
// ruleChains.
func ParseListing(data []byte, table Table, ruleChains ...Chain) *Listing {
	l := &Listing{Table: table, Chains: map[Chain]struct{}{}, rules: map[string]struct{}{}}
	from := make([][]byte, 0, len(ruleChains))
	for _, c := range ruleChains {
		from = append(from, []byte("-A "+string(c)+" "))
	}
	sc := lines.New(data)
	for sc.Scan() {
		line := sc.Line()
		switch {
		case len(line) > 1 && line[0] == ':':
			name := line[1:]
			if j := bytes.IndexByte(name, ' '); j >= 0 {
				name = name[:j]
			}
			l.Chains[Chain(name)] = struct{}{}
		case len(line) > 3 && line[0] == '-' && line[1] == 'A':
			for _, f := range from {
				if bytes.HasPrefix(line, f) {
					l.rules[string(line)] = struct{}{}
					break
				}
			}
		}
	}
	return l
}

// HasChain reports whether the listing declares c.
func (l *Listing) HasChain(c Chain) bool {
	_, ok := l.Chains[c]
	return ok
}

// HasJump reports whether the listing holds j (its From chain must have
// been among ParseListing's ruleChains).
func (l *Listing) HasJump(j JumpRule) bool {
	_, ok := l.rules[j.saveLine()]
	return ok
}

// JumpSources returns the distinct From chains of the rules of table, for
// ParseListing.
func JumpSources(rules []JumpRule, table Table) []Chain {
	var out []Chain
	for _, j := range rules {
		if j.Table != table {
			continue
		}
		dup := false
		for _, c := range out {
			dup = dup || c == j.From
		}
		if !dup {
			out = append(out, j.From)
		}
	}
	return out
}

// EnsureJumpRules creates each rule's target chain unless it exists, then
// adds the rule at pos unless it is there. listed, when it has a Listing
// of a rule's table, saves the commands for what the listing already
// shows (with the legacy backend every single-rule command loads the
// whole table: see BenchmarkKernelSync in BENCHMARKS.md); without one, each
// chain and rule is checked with a command. It stops at the first error.
func EnsureJumpRules(ctx context.Context, r Runner, pos RulePosition, rules []JumpRule, listed map[Table]*Listing) error {
	ensured := map[Table]map[Chain]bool{}
	for _, j := range rules {
		l := listed[j.Table]
		if !ensured[j.Table][j.To] && (l == nil || !l.HasChain(j.To)) {
			if _, err := r.EnsureChain(ctx, j.Table, j.To); err != nil {
				return fmt.Errorf("creating %s/%s: %w", j.Table, j.To, err)
			}
		}
		if ensured[j.Table] == nil {
			ensured[j.Table] = map[Chain]bool{}
		}
		ensured[j.Table][j.To] = true
		if l != nil && l.HasJump(j) {
			continue
		}
		if _, err := r.EnsureRule(ctx, pos, j.Table, j.From, j.Args()...); err != nil {
			return fmt.Errorf("hooking %s/%s into %s: %w", j.Table, j.To, j.From, err)
		}
	}
	return nil
}

// TableChain names a chain of a table.
type TableChain struct {
	Table Table
	Chain Chain
}

// JumpRulesRestore is EnsureJumpRules(ctx, r, pos, rules, listed)
// followed by r.EnsureChain of each of chains, as one iptables-restore
// --noflush input instead of a command per missing chain and rule (each
// one, with the legacy backend, loads and replaces the whole table; on a
// node without our chains that was ~45 processes). It needs a Listing of
// every table involved: ok is false when one is missing, and the caller
// then runs EnsureJumpRules. data is nil when the listings show nothing
// missing. The input holds, per table in the order the tables come up,
// "-N CHAIN" for each missing chain and "-I FROM 1 rule" (Prepend) or
// "-A FROM rule" (Append) for each missing rule, in the order the commands
// would run, so the rules end in the same order. A chain is created with
// -N, not declared with a ":" line, which would flush it had it appeared
// since the listing: -N then fails the restore (a failed table changes
// nothing), and the caller can fall back to the commands.
func JumpRulesRestore(pos RulePosition, rules []JumpRule, chains []TableChain, listed map[Table]*Listing) (data []byte, ok bool) {
	type section struct {
		table Table
		lines []byte
	}
	var sections []section
	linesOf := func(t Table) *[]byte {
		for i := range sections {
			if sections[i].table == t {
				return &sections[i].lines
			}
		}
		sections = append(sections, section{table: t})
		return &sections[len(sections)-1].lines
	}
	created := map[TableChain]bool{}
	newChain := func(t Table, c Chain) {
		if created[TableChain{t, c}] || listed[t].HasChain(c) {
			return
		}
		created[TableChain{t, c}] = true
		b := linesOf(t)
		*b = append(append(append(*b, "-N "...), c...), '\n')
	}
	for _, j := range rules {
		if listed[j.Table] == nil {
			return nil, false
		}
	}
	for _, tc := range chains {
		if listed[tc.Table] == nil {
			return nil, false
		}
	}
	op := "-A "
	if pos == Prepend {
		op = "-I "
	}
	for _, j := range rules {
		newChain(j.Table, j.To)
		if listed[j.Table].HasJump(j) {
			continue
		}
		b := linesOf(j.Table)
		*b = append(j.appendLine(*b, op), '\n')
	}
	for _, tc := range chains {
		newChain(tc.Table, tc.Chain)
	}
	for _, s := range sections {
		if len(s.lines) == 0 {
			continue
		}
		data = append(data, '*')
		data = append(data, s.table...)
		data = append(data, '\n')
		data = append(data, s.lines...)
		data = append(data, "COMMIT\n"...)
	}
	return data, true
}

// DeleteJumpRules deletes every rule that exists (a missing one is no
// error) and returns the errors of the others, joined, after trying all.
// The chains they jump to are left to the caller.
func DeleteJumpRules(ctx context.Context, r Runner, rules []JumpRule) error {
	var errs []error
	for _, j := range rules {
		if err := r.DeleteRule(ctx, j.Table, j.From, j.Args()...); err != nil {
			errs = append(errs, fmt.Errorf("unhooking %s/%s from %s: %w", j.Table, j.To, j.From, err))
		}
	}
	return errors.Join(errs...)
}
