package xtablestest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Fake is an in-memory iptables for one IP family, implementing
// xtables.Runner. It keeps the real state: tables, their built-in chains
// (with policies) and user chains, and each chain's rules in order. It
// validates what it is given as the kernel and the iptables tools do, so a
// rule the real iptables-restore would refuse fails here too.
//
// The zero value is not usable; call NewFake or NewFakeFromDump. A Fake is
// safe for concurrent use.
type Fake struct {
	mu          sync.Mutex
	family      v1.IPFamily
	tables      map[xtables.Table]*tableState
	randomFully bool
	stats       Stats
	restoreHook func(data []byte) error
	// changes counts the calls that may have changed a table (TableStamp).
	changes uint64
	// gen models the nftables generation id (watch.go): one per command
	// that changed a table, one per restored table section with a line.
	gen   uint32
	watch string
	caps  xtables.Capabilities

	// Faults injects failures and counts calls, by method name
	// ("Restore", "SaveInto", "EnsureRule", ...). A failed call changes
	// nothing (a failed Restore is still counted in Stats).
	proxytest.Faults
}

var _ xtables.Runner = (*Fake)(nil)

// Stats counts what was written to a Fake, for tests that assert how much
// work an engine did (for example that a sync with no changes writes
// nothing).
type Stats struct {
	// Restores counts Restore calls, FailedRestores those that returned an error.
	Restores, FailedRestores int
	// TypedRestores counts the Restore calls whose input had its lines
	// typed (RestoreInput.Ops not empty).
	TypedRestores int
	// RestoreLines and RestoreBytes total the input of all Restore calls.
	RestoreLines, RestoreBytes int
	// LastRestore is a copy of the input of the last Restore call.
	LastRestore []byte
	// Commands counts the other calls that may change state (EnsureChain,
	// FlushChain, DeleteChain, EnsureRule, DeleteRule).
	Commands int
	// ReadBacksAsked counts CheckNextRestore calls (an engine asks at the
	// start of each full sync; the Fake reads nothing back).
	ReadBacksAsked int
}

type chainState struct {
	name    xtables.Chain
	builtin bool
	policy  string // built-in chains: ACCEPT or DROP
	rules   []*rule
}

type tableState struct {
	name   xtables.Table
	chains map[xtables.Chain]*chainState
	// refs counts, per user chain, the rules that jump or go to it.
	refs map[xtables.Chain]int
	// pendingEdges are jumps added since the last loop check.
	pendingEdges []edge
	// undo, during a Restore, records what to put back if the table fails.
	undo *undoLog
}

// undoLog records the original value of every chain and reference count
// a Restore changes, so a failing table is put back in O(changes) and a
// successful one costs nothing to commit.
type undoLog struct {
	chains map[xtables.Chain]*chainState // nil: the chain did not exist
	refs   map[xtables.Chain]savedRef
}

type savedRef struct {
	n       int
	present bool
}

func (t *tableState) begin() {
	t.undo = &undoLog{chains: map[xtables.Chain]*chainState{}, refs: map[xtables.Chain]savedRef{}}
	t.pendingEdges = nil
}

func (t *tableState) commit() { t.undo = nil }

func (t *tableState) rollback() {
	for name, c := range t.undo.chains {
		if c == nil {
			delete(t.chains, name)
		} else {
			t.chains[name] = c
		}
	}
	for name, r := range t.undo.refs {
		if r.present {
			t.refs[name] = r.n
		} else {
			delete(t.refs, name)
		}
	}
	t.undo = nil
	t.pendingEdges = nil
}

func (t *tableState) saveRef(name xtables.Chain) {
	if t.undo == nil {
		return
	}
	if _, ok := t.undo.refs[name]; !ok {
		n, present := t.refs[name]
		t.undo.refs[name] = savedRef{n, present}
	}
}

func (t *tableState) saveChain(name xtables.Chain) {
	if t.undo == nil {
		return
	}
	if _, ok := t.undo.chains[name]; !ok {
		t.undo.chains[name] = t.chains[name]
	}
}

// own returns chain name ready to be changed: during a Restore, a copy
// the undo log keeps the original of.
func (t *tableState) own(name xtables.Chain) (*chainState, bool) {
	c, ok := t.chains[name]
	if !ok || t.undo == nil {
		return c, ok
	}
	if _, saved := t.undo.chains[name]; saved {
		return c, true // already this Restore's copy (or created by it)
	}
	t.undo.chains[name] = c
	c = &chainState{name: c.name, builtin: c.builtin, policy: c.policy, rules: slices.Clone(c.rules)}
	t.chains[name] = c
	return c, true
}

func (t *tableState) addChain(c *chainState) {
	t.saveChain(c.name)
	t.chains[c.name] = c
}

func newTable(name xtables.Table) *tableState {
	t := &tableState{name: name, chains: map[xtables.Chain]*chainState{}, refs: map[xtables.Chain]int{}}
	for _, c := range builtinChains[name] {
		t.chains[c] = &chainState{name: c, builtin: true, policy: "ACCEPT"}
	}
	return t
}

// NewFake returns an empty Fake for family (v1.IPv6Protocol; any other
// value, "" included, means v1.IPv4Protocol): no table holds anything
// beyond its built-in chains
// with an ACCEPT policy. Tables appear in Dump once something touched them.
// HasRandomFully reports true until SetHasRandomFully says otherwise (the
// engines no longer ask: they always write --random-fully).
func NewFake(family v1.IPFamily) *Fake {
	if family != v1.IPv6Protocol {
		family = v1.IPv4Protocol
	}
	return &Fake{family: family, tables: map[xtables.Table]*tableState{}, randomFully: true}
}

// NewFakeFromDump returns a Fake holding the state described by text, in
// iptables-save format (as Dump writes it, or as captured from a real
// node with iptables-save; "# ..." comments and "[packets:bytes]"
// counters are ignored). The stats start at zero.
func NewFakeFromDump(family v1.IPFamily, text string) (*Fake, error) {
	f := NewFake(family)
	if err := f.restore([]byte(text)); err != nil {
		return nil, err
	}
	return f, nil
}

// Family implements xtables.Runner.
func (f *Fake) Family() v1.IPFamily { return f.family }

// HasRandomFully implements xtables.Runner.
func (f *Fake) HasRandomFully() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.randomFully
}

// SetHasRandomFully sets what HasRandomFully reports. With false, rules
// using MASQUERADE --random-fully are refused, as by an old kernel.
func (f *Fake) SetHasRandomFully(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.randomFully = v
}

// FailNextRestore makes the next Restore call return err without
// changing anything.
//
// Deprecated: use f.FailOn("Restore", 1, err); kept while the ipvs and
// userspace tests move to it.
func (f *Fake) FailNextRestore(err error) { f.FailOn("Restore", 1, err) }

// SetRestoreHook installs hook, called with the input of every Restore
// before it is applied (unless an injected failure came first). A
// non-nil error fails that Restore without changing anything. The hook
// runs with the Fake locked: it must not call the Fake. nil removes it.
func (f *Fake) SetRestoreHook(hook func(data []byte) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restoreHook = hook
}

// Stats returns a snapshot of the counters.
func (f *Fake) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.LastRestore = bytes.Clone(s.LastRestore)
	return s
}

// ResetStats zeroes the counters (the state is kept).
func (f *Fake) ResetStats() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = Stats{}
}

func checkTable(table xtables.Table) error {
	if _, ok := builtinChains[table]; !ok {
		return fmt.Errorf("%w %q", ErrUnknownTable, table)
	}
	return nil
}

// table returns the table, creating it (with its built-in chains) if
// create is set; without create a missing table is returned as a fresh,
// unregistered one, as the kernel would load it on demand.
func (f *Fake) table(table xtables.Table, create bool) (*tableState, error) {
	if err := checkTable(table); err != nil {
		return nil, err
	}
	t := f.tables[table]
	if t == nil {
		t = newTable(table)
		if create {
			f.tables[table] = t
		}
	}
	return t, nil
}

// EnsureChain implements xtables.Runner (iptables -N).
func (f *Fake) EnsureChain(ctx context.Context, table xtables.Table, chain xtables.Chain) (bool, error) {
	if err := f.Hit("EnsureChain"); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Commands++
	f.changes++
	t, err := f.table(table, true)
	if err != nil {
		return false, err
	}
	if _, ok := t.chains[chain]; ok {
		return true, nil
	}
	if err := validateChainName(chain); err != nil {
		return false, err
	}
	t.chains[chain] = &chainState{name: chain}
	f.gen++
	return false, nil
}

// FlushChain implements xtables.Runner (iptables -F).
func (f *Fake) FlushChain(ctx context.Context, table xtables.Table, chain xtables.Chain) error {
	if err := f.Hit("FlushChain"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Commands++
	f.changes++
	t, err := f.table(table, true)
	if err != nil {
		return err
	}
	return f.counted(t.flush(chain))
}

// DeleteChain implements xtables.Runner (iptables -X): the chain must be
// an empty, unreferenced user chain.
func (f *Fake) DeleteChain(ctx context.Context, table xtables.Table, chain xtables.Chain) error {
	if err := f.Hit("DeleteChain"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Commands++
	f.changes++
	t, err := f.table(table, true)
	if err != nil {
		return err
	}
	return f.counted(t.deleteChain(chain))
}

// ChainExists implements xtables.Runner.
func (f *Fake) ChainExists(ctx context.Context, table xtables.Table, chain xtables.Chain) (bool, error) {
	if err := f.Hit("ChainExists"); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table, false)
	if err != nil {
		return false, err
	}
	_, ok := t.chains[chain]
	return ok, nil
}

// EnsureRule implements xtables.Runner (iptables -C, then -A or -I).
// Rules are compared as the kernel compares them: "-d 10.0.0.1" and
// "-d 10.0.0.1/32" are the same rule, as are "-p tcp --dport 80" and
// "-p tcp -m tcp --dport 80".
func (f *Fake) EnsureRule(ctx context.Context, position xtables.RulePosition, table xtables.Table, chain xtables.Chain, args ...string) (bool, error) {
	if err := f.Hit("EnsureRule"); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if position != xtables.Prepend && position != xtables.Append {
		return false, fmt.Errorf("xtablestest: invalid rule position %q", position)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Commands++
	f.changes++
	t, err := f.table(table, true)
	if err != nil {
		return false, err
	}
	c, ok := t.chains[chain]
	if !ok {
		return false, fmt.Errorf("%w: chain %q in table %q", ErrNoSuchChain, chain, table)
	}
	r, err := f.parseRuleIn(t, args)
	if err != nil {
		return false, err
	}
	if err := checkHook(table, chain, r); err != nil {
		return false, err
	}
	if c.find(r.key) >= 0 {
		return true, nil
	}
	pos := len(c.rules)
	if position == xtables.Prepend {
		pos = 0
	}
	t.insert(c, pos, r)
	if loop := t.findNewLoop(); loop != nil {
		t.remove(c, pos)
		return false, fmt.Errorf("%w: %v", ErrLoop, loop)
	}
	f.gen++
	return false, nil
}

// DeleteRule implements xtables.Runner: it deletes the first rule equal
// to args. A missing rule or chain is not an error (nor a rule jumping to
// a chain that does not exist, which cannot be there); a rule that does
// not parse is.
func (f *Fake) DeleteRule(ctx context.Context, table xtables.Table, chain xtables.Chain, args ...string) error {
	if err := f.Hit("DeleteRule"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Commands++
	f.changes++
	t, err := f.table(table, false)
	if err != nil {
		return err
	}
	// A rule that does not parse is an error (as with iptables -C). A
	// missing chain or rule is not, nor is a rule jumping to a chain that
	// does not exist: such a rule cannot exist (the Runner contract;
	// iptables -C exits 2 there, which a Runner must treat as missing).
	r, err := parseRule(f.family, table, args)
	if err != nil {
		return err
	}
	c, ok := t.chains[chain]
	if !ok {
		return nil
	}
	if i := c.find(r.key); i >= 0 {
		t.remove(c, i)
		f.gen++
	}
	return nil
}

// SaveInto implements xtables.Runner (iptables-save -t table).
func (f *Fake) SaveInto(ctx context.Context, table xtables.Table, buf *bytes.Buffer) error {
	if err := f.Hit("SaveInto"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table, false)
	if err != nil {
		return err
	}
	t.dump(buf)
	return nil
}

// Restore implements xtables.Runner: iptables-restore --noflush. See the
// package documentation for the exact semantics. A failing line gives an
// *xtables.RestoreError (Line, LineText) wrapping one of this package's
// errors (ErrNoSuchChain, ErrBadRule, ...); an error injected with
// FailNextRestore or SetRestoreHook is returned as is.
//
// The Fake parses in.Text whatever in.Ops say; a typed input is counted
// in Stats.TypedRestores besides Restores.
func (f *Fake) Restore(ctx context.Context, in xtables.RestoreInput) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data := in.Text
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Restores++
	if len(in.Ops) > 0 {
		f.stats.TypedRestores++
	}
	f.stats.RestoreBytes += len(data)
	f.stats.RestoreLines += bytes.Count(data, []byte{'\n'})
	if len(data) > 0 && data[len(data)-1] != '\n' {
		f.stats.RestoreLines++
	}
	f.stats.LastRestore = bytes.Clone(data)
	err := f.Hit("Restore")
	if err == nil && f.restoreHook != nil {
		err = f.restoreHook(data)
	}
	if err == nil {
		f.changes++
		err = f.restore(data)
		if err == nil {
			f.gen += uint32(xtables.SectionsWithCommands(data))
		}
	}
	if err != nil {
		f.stats.FailedRestores++
	}
	return err
}

// Capabilities implements xtables.Runner: what SetCapabilities set, by
// default the zero value, a Runner that writes no kernel (the engines
// split no restore and list one table per iptables-save).
func (f *Fake) Capabilities() xtables.Capabilities {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.caps
}

// SetCapabilities sets what Capabilities reports, to drive an engine as a
// real Runner of that backend would be driven: with SaveAll, SaveAllInto
// lists every table the Fake holds. It changes nothing else (the Fake's
// restores are its own whatever InProcess says; SetTableWatch models the
// backend's table watch).
func (f *Fake) SetCapabilities(c xtables.Capabilities) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.caps = c
}

// CheckNextRestore implements xtables.Runner: it counts the call in
// Stats.ReadBacksAsked; the Fake's restores are its own, nothing is read
// back.
func (f *Fake) CheckNextRestore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.ReadBacksAsked++
}

// SaveAllInto implements xtables.Runner (iptables-save of every table,
// as Dump prints them); without Capabilities().SaveAll it fails with an
// error matching errors.ErrUnsupported.
func (f *Fake) SaveAllInto(ctx context.Context, buf *bytes.Buffer) error {
	if err := f.Hit("SaveAllInto"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.caps.SaveAll {
		return fmt.Errorf("xtablestest: SaveAllInto: %w", errors.ErrUnsupported)
	}
	for _, name := range tableOrder {
		if t := f.tables[name]; t != nil {
			t.dump(buf)
		}
	}
	return nil
}

// TableStamp implements xtables.Runner as the legacy backend's runner
// does, conservatively: the stamp of every table changes with each
// call that may have changed any table.
func (f *Fake) TableStamp(table xtables.Table) (uint64, bool, error) {
	if err := checkTable(table); err != nil {
		return 0, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes, true, nil
}

// Dump returns the whole state in iptables-save format: every table that
// was touched, in the order raw, mangle, nat, filter, security; in each,
// built-in chains in hook order then user chains sorted by name (as
// iptables-legacy-save prints them), then the rules chain by chain. Rules
// are printed normalized (see the package documentation), so the output
// is the same whichever equivalent spelling was written, and
// NewFakeFromDump(family, f.Dump()) holds the same state. There are no
// "# Generated by" lines and counters are always [0:0].
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, name := range tableOrder {
		if t := f.tables[name]; t != nil {
			var buf bytes.Buffer
			t.dump(&buf)
			b.Write(buf.Bytes())
		}
	}
	return b.String()
}

// Chains returns the chains of table: built-in ones in hook order, then
// user chains sorted by name.
func (f *Fake) Chains(table xtables.Table) ([]xtables.Chain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table, false)
	if err != nil {
		return nil, err
	}
	return t.chainOrder(), nil
}

// Rules returns the rules of chain in order, each rendered as iptables-save
// prints it after "-A CHAIN ".
func (f *Fake) Rules(table xtables.Table, chain xtables.Chain) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table, false)
	if err != nil {
		return nil, err
	}
	c, ok := t.chains[chain]
	if !ok {
		return nil, fmt.Errorf("%w: chain %q in table %q", ErrNoSuchChain, chain, table)
	}
	out := make([]string, len(c.rules))
	for i, r := range c.rules {
		out[i] = r.text()
	}
	return out, nil
}

// Policy returns the policy of a built-in chain (ACCEPT or DROP).
func (f *Fake) Policy(table xtables.Table, chain xtables.Chain) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table, false)
	if err != nil {
		return "", err
	}
	c, ok := t.chains[chain]
	if !ok || !c.builtin {
		return "", fmt.Errorf("%w: %q is not a built-in chain of table %q", ErrBuiltinChain, chain, table)
	}
	return c.policy, nil
}

func (f *Fake) parseRuleIn(t *tableState, args []string) (*rule, error) {
	r, err := parseRule(f.family, t.name, args)
	if err != nil {
		return nil, err
	}
	return r, f.checkRuleTargets(t, r)
}

// checkRuleTargets checks what the kernel checks when a rule is added:
// the jump target exists and is a user chain, and the extensions used are
// available.
func (f *Fake) checkRuleTargets(t *tableState, r *rule) error {
	if to := r.jumpsTo(); to != "" {
		c, ok := t.chains[to]
		if !ok {
			return fmt.Errorf("%w: jump target %q does not exist in table %q", ErrNoSuchChain, to, t.name)
		}
		if c.builtin {
			return fmt.Errorf("%w: cannot jump to built-in chain %q", ErrBuiltinChain, to)
		}
	}
	if r.target == "MASQUERADE" && !f.randomFully {
		for _, o := range r.targetOpts {
			if o.name == "--random-fully" {
				return fmt.Errorf("%w: MASQUERADE --random-fully is not supported by this (fake) kernel", ErrBadRule)
			}
		}
	}
	return nil
}

// State manipulation. These mutate the tableState in place; Restore works
// on a copy (see clone) so a failed table leaves nothing behind.

func (c *chainState) find(key string) int {
	for i, r := range c.rules {
		if r.key == key {
			return i
		}
	}
	return -1
}

func (t *tableState) insert(c *chainState, pos int, r *rule) {
	c.rules = slices.Insert(c.rules, pos, r)
	if to := r.jumpsTo(); to != "" {
		t.saveRef(to)
		t.refs[to]++
		t.pendingEdges = append(t.pendingEdges, edge{c.name, to})
	}
}

func (t *tableState) remove(c *chainState, i int) {
	if to := c.rules[i].jumpsTo(); to != "" {
		t.unref(to)
	}
	c.rules = slices.Delete(c.rules, i, i+1)
}

func (t *tableState) unref(to xtables.Chain) {
	t.saveRef(to)
	if t.refs[to]--; t.refs[to] <= 0 {
		delete(t.refs, to)
	}
}

func (t *tableState) flush(chain xtables.Chain) error {
	c, ok := t.own(chain)
	if !ok {
		return fmt.Errorf("%w: chain %q in table %q", ErrNoSuchChain, chain, t.name)
	}
	for _, r := range c.rules {
		if to := r.jumpsTo(); to != "" {
			t.unref(to)
		}
	}
	c.rules = nil
	return nil
}

func (t *tableState) deleteChain(chain xtables.Chain) error {
	c, ok := t.chains[chain]
	switch {
	case !ok:
		return fmt.Errorf("%w: chain %q in table %q", ErrNoSuchChain, chain, t.name)
	case c.builtin:
		return fmt.Errorf("%w: cannot delete built-in chain %q", ErrBuiltinChain, chain)
	case t.refs[chain] > 0:
		return fmt.Errorf("%w: chain %q in table %q has %d reference(s)", ErrChainInUse, chain, t.name, t.refs[chain])
	case len(c.rules) > 0:
		return fmt.Errorf("%w: chain %q in table %q has %d rule(s)", ErrChainNotEmpty, chain, t.name, len(c.rules))
	}
	t.saveChain(chain)
	delete(t.chains, chain)
	return nil
}

func (t *tableState) chainOrder() []xtables.Chain {
	out := slices.Clone(builtinChains[t.name])
	var user []xtables.Chain
	for name, c := range t.chains {
		if !c.builtin {
			user = append(user, name)
		}
	}
	sort.Slice(user, func(i, j int) bool { return user[i] < user[j] })
	return append(out, user...)
}

func (t *tableState) dump(buf *bytes.Buffer) {
	order := t.chainOrder()
	buf.WriteString("*" + string(t.name) + "\n")
	for _, name := range order {
		c := t.chains[name]
		policy := "-"
		if c.builtin {
			policy = c.policy
		}
		buf.WriteString(":" + string(name) + " " + policy + " [0:0]\n")
	}
	for _, name := range order {
		for _, r := range t.chains[name].rules {
			buf.WriteString("-A ")
			buf.WriteString(string(name))
			if text := r.text(); text != "" {
				buf.WriteByte(' ')
				buf.WriteString(text)
			}
			buf.WriteByte('\n')
		}
	}
	buf.WriteString("COMMIT\n")
}

// edge is a jump or goto from one chain to another.
type edge struct{ from, to xtables.Chain }

// findNewLoop reports a loop in the jumps that the kernel would refuse
// (ELOOP): one reachable from a built-in chain (the kernel only walks
// the chains reachable from its hooks; an unreachable loop is accepted).
// Any such loop became reachable through an edge added since the last
// check, so only those are examined: a new edge from -> to matters if a
// loop is reachable from to and from is reachable from a built-in chain.
// The pending edges are consumed.
func (t *tableState) findNewLoop() []xtables.Chain {
	edges := t.pendingEdges
	t.pendingEdges = nil
	var fromBuiltin map[xtables.Chain]bool // computed only when needed
	state := map[xtables.Chain]int{}       // shared: a chain found loop-free stays so
	for _, e := range edges {
		if _, ok := t.chains[e.from]; !ok {
			continue // the rule's chain was deleted since
		}
		loop := t.loopFrom(e.to, state)
		if loop == nil {
			continue
		}
		if fromBuiltin == nil {
			fromBuiltin = t.reachableFromBuiltins()
		}
		if fromBuiltin[e.from] {
			return loop
		}
		// An unreachable loop, which the kernel accepts. The walk stopped
		// half way, leaving chains marked in progress: start afresh.
		clear(state)
	}
	return nil
}

// loopFrom returns a loop of jumps reachable from chain start, or nil.
func (t *tableState) loopFrom(start xtables.Chain, state map[xtables.Chain]int) []xtables.Chain {
	const (
		visiting = 1
		done     = 2
	)
	var stack []xtables.Chain
	var visit func(c xtables.Chain) []xtables.Chain
	visit = func(c xtables.Chain) []xtables.Chain {
		switch state[c] {
		case visiting:
			i := slices.Index(stack, c)
			return append(slices.Clone(stack[i:]), c)
		case done:
			return nil
		}
		cs, ok := t.chains[c]
		if !ok {
			return nil
		}
		state[c] = visiting
		stack = append(stack, c)
		for _, r := range cs.rules {
			if next := r.jumpsTo(); next != "" {
				if loop := visit(next); loop != nil {
					return loop
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[c] = done
		return nil
	}
	return visit(start)
}

func (t *tableState) reachableFromBuiltins() map[xtables.Chain]bool {
	seen := map[xtables.Chain]bool{}
	var walk func(c xtables.Chain)
	walk = func(c xtables.Chain) {
		if seen[c] {
			return
		}
		seen[c] = true
		if cs, ok := t.chains[c]; ok {
			for _, r := range cs.rules {
				if next := r.jumpsTo(); next != "" {
					walk(next)
				}
			}
		}
	}
	for _, c := range builtinChains[t.name] {
		walk(c)
	}
	return seen
}

// restore applies iptables-restore --noflush input. Each table is applied
// at its COMMIT line, on a copy, as the real tool commits each table
// separately: a failure leaves the failing table unchanged while tables
// committed earlier in the same input stay committed.
func (f *Fake) restore(data []byte) error {
	var (
		cur    *tableState // table being edited, nil outside *table ... COMMIT
		lineNo int
	)
	fail := func(line string, err error) error {
		if cur != nil {
			cur.rollback()
		}
		return restoreError(lineNo, line, err)
	}
	text := string(data)
	for len(text) > 0 {
		var line string
		line, text, _ = strings.Cut(text, "\n")
		lineNo++
		line = strings.TrimRight(line, "\r")
		trimmed := strings.Trim(line, " \t")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		switch {
		case strings.HasPrefix(trimmed, "*"):
			if cur != nil {
				return fail(line, fmt.Errorf("%w: table %q started before COMMIT of %q", ErrBadRule, trimmed[1:], cur.name))
			}
			t, err := f.table(xtables.Table(strings.Trim(trimmed[1:], " \t")), false)
			if err != nil {
				return fail(line, err)
			}
			cur = t
			cur.begin()
			continue
		case trimmed == "COMMIT":
			if cur == nil {
				return fail(line, fmt.Errorf("%w: COMMIT outside a table", ErrBadRule))
			}
			if loop := cur.findNewLoop(); loop != nil {
				return fail(line, fmt.Errorf("%w: %v", ErrLoop, loop))
			}
			cur.commit()
			f.tables[cur.name] = cur
			cur = nil
			continue
		}
		if cur == nil {
			return fail(line, fmt.Errorf("%w: no table specified (missing *table line)", ErrBadRule))
		}
		var err error
		if strings.HasPrefix(trimmed, ":") {
			err = restoreChainLine(cur, trimmed)
		} else {
			err = f.restoreCommand(cur, trimmed)
		}
		if err != nil {
			return fail(line, err)
		}
	}
	if cur != nil {
		lineNo++
		return fail("", fmt.Errorf("%w: COMMIT expected for table %q", ErrBadRule, cur.name))
	}
	return nil
}

// restoreChainLine applies ":CHAIN POLICY [packets:bytes]".
func restoreChainLine(cur *tableState, trimmed string) error {
	fields := strings.FieldsFunc(trimmed[1:], func(r rune) bool { return r == ' ' || r == '\t' })
	if len(fields) < 2 || len(fields) > 3 {
		return fmt.Errorf("%w: chain line needs a name and a policy", ErrBadRule)
	}
	name, policy := xtables.Chain(fields[0]), fields[1]
	if len(fields) == 3 && !validCounters(fields[2]) {
		return fmt.Errorf("%w: bad counters %q", ErrBadRule, fields[2])
	}
	if isBuiltinChain(cur.name, name) {
		switch policy {
		case "-":
		case "ACCEPT", "DROP":
			c, _ := cur.own(name)
			c.policy = policy
		default:
			return fmt.Errorf("%w: invalid policy %q", ErrBadRule, policy)
		}
		return nil
	}
	if policy != "-" {
		// iptables-legacy-restore refuses this; iptables-nft-restore
		// ignores the policy. The fake is strict.
		return fmt.Errorf("%w: cannot set policy %q on user chain %q", ErrBuiltinChain, policy, name)
	}
	if err := validateChainName(name); err != nil {
		return err
	}
	if _, ok := cur.chains[name]; ok {
		return cur.flush(name) // --noflush: declaring an existing user chain flushes it
	}
	cur.addChain(&chainState{name: name})
	return nil
}

func validCounters(s string) bool {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return false
	}
	p, b, ok := strings.Cut(s[1:len(s)-1], ":")
	return ok && isDigits(p) && isDigits(b)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// restoreCommand applies one command line (-A, -I, -D, -R, -N, -X, -F, -P, -Z).
func (f *Fake) restoreCommand(cur *tableState, line string) error {
	noChain := func(name string) error {
		return fmt.Errorf("%w: chain %q in table %q", ErrNoSuchChain, name, cur.name)
	}
	if strings.HasPrefix(line, "[") {
		counters, rest, _ := strings.Cut(line, " ")
		if !validCounters(counters) {
			return fmt.Errorf("%w: bad counters %q", ErrBadRule, counters)
		}
		line = strings.TrimSpace(rest)
	}
	args, err := splitArgs(line)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: empty command", ErrBadRule)
	}
	cmd, args := args[0], args[1:]
	chainArg := func() (xtables.Chain, bool) {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return "", false
		}
		c := xtables.Chain(args[0])
		args = args[1:]
		return c, true
	}
	ruleNum := func(max int) (int, bool, error) {
		if len(args) == 0 || !isDigits(args[0]) {
			return 0, false, nil
		}
		var n int
		fmt.Sscan(args[0], &n)
		args = args[1:]
		if n < 1 || n > max {
			return 0, true, fmt.Errorf("%w: rule number %d out of range", ErrNoSuchRule, n)
		}
		return n, true, nil
	}
	switch cmd {
	case "-A", "--append", "-I", "--insert", "-D", "--delete", "-R", "--replace":
		name, ok := chainArg()
		if !ok {
			return fmt.Errorf("%w: %s needs a chain", ErrBadRule, cmd)
		}
		c, ok := cur.own(name)
		if !ok {
			return noChain(string(name))
		}
		var pos int
		switch cmd {
		case "-A", "--append":
			pos = len(c.rules)
		case "-I", "--insert":
			n, given, err := ruleNum(len(c.rules) + 1)
			if err != nil {
				return err
			}
			if !given {
				n = 1
			}
			pos = n - 1
		case "-D", "--delete":
			n, given, err := ruleNum(len(c.rules))
			if err != nil {
				return err
			}
			if given {
				if len(args) > 0 {
					return fmt.Errorf("%w: -D with a rule number takes no rule", ErrBadRule)
				}
				cur.remove(c, n-1)
				return nil
			}
			r, err := parseRule(f.family, cur.name, args)
			if err != nil {
				return err
			}
			i := c.find(r.key)
			if i < 0 {
				return fmt.Errorf("%w: %q", ErrNoSuchRule, r.text())
			}
			cur.remove(c, i)
			return nil
		case "-R", "--replace":
			n, given, err := ruleNum(len(c.rules))
			if err != nil {
				return err
			}
			if !given {
				return fmt.Errorf("%w: -R needs a rule number", ErrBadRule)
			}
			r, err := f.parseRuleIn(cur, args)
			if err != nil {
				return err
			}
			if err := checkHook(cur.name, name, r); err != nil {
				return err
			}
			cur.remove(c, n-1)
			cur.insert(c, n-1, r)
			return nil
		}
		r, err := f.parseRuleIn(cur, args)
		if err != nil {
			return err
		}
		if err := checkHook(cur.name, name, r); err != nil {
			return err
		}
		cur.insert(c, pos, r)
		return nil
	case "-N", "--new-chain":
		name, ok := chainArg()
		if !ok || len(args) > 0 {
			return fmt.Errorf("%w: -N needs exactly one chain", ErrBadRule)
		}
		if _, exists := cur.chains[name]; exists {
			return fmt.Errorf("%w: %q in table %q", ErrChainExists, name, cur.name)
		}
		if err := validateChainName(name); err != nil {
			return err
		}
		cur.addChain(&chainState{name: name})
		return nil
	case "-X", "--delete-chain":
		name, ok := chainArg()
		if len(args) > 0 {
			return fmt.Errorf("%w: -X takes at most one chain", ErrBadRule)
		}
		if ok {
			return cur.deleteChain(name)
		}
		for _, n := range cur.chainOrder() {
			if !cur.chains[n].builtin {
				if err := cur.deleteChain(n); err != nil {
					return err
				}
			}
		}
		return nil
	case "-F", "--flush":
		name, ok := chainArg()
		if len(args) > 0 {
			return fmt.Errorf("%w: -F takes at most one chain", ErrBadRule)
		}
		if ok {
			if _, exists := cur.chains[name]; !exists {
				return noChain(string(name))
			}
			return cur.flush(name)
		}
		for _, n := range cur.chainOrder() {
			_ = cur.flush(n)
		}
		return nil
	case "-P", "--policy":
		name, ok := chainArg()
		if !ok || len(args) != 1 {
			return fmt.Errorf("%w: -P needs a chain and a policy", ErrBadRule)
		}
		if !isBuiltinChain(cur.name, name) {
			return fmt.Errorf("%w: cannot set policy on %q", ErrBuiltinChain, name)
		}
		if args[0] != "ACCEPT" && args[0] != "DROP" {
			return fmt.Errorf("%w: invalid policy %q", ErrBadRule, args[0])
		}
		c, _ := cur.own(name)
		c.policy = args[0]
		return nil
	case "-Z", "--zero":
		name, ok := chainArg()
		if ok {
			if _, exists := cur.chains[name]; !exists {
				return noChain(string(name))
			}
		}
		return nil
	case "-E", "--rename-chain":
		return fmt.Errorf("%w: -E (rename chain) is not supported by the fake", ErrBadRule)
	}
	return fmt.Errorf("%w: unknown command %q", ErrBadRule, cmd)
}

// counted notes a command that changed a table (err nil) in the modelled
// generation.
func (f *Fake) counted(err error) error {
	if err == nil {
		f.gen++
	}
	return err
}
