package xtblob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// DefaultLockWait is how long Restore waits for the xtables lock when
// RestoreOptions.LockWait is zero (the engines' default, as kube-proxy's).
const DefaultLockWait = 5 * time.Second

// ErrLockHeld is wrapped by Restore's error when another program held the
// xtables lock for all of RestoreOptions.LockWait. Nothing was written.
var ErrLockHeld = errors.New("xtblob: xtables lock held by another program")

// RestoreOptions configures Restore. The zero value is ready to use.
type RestoreOptions struct {
	// LockFile is the xtables lock to hold while the tables are read,
	// changed and written. Empty: $XTABLES_LOCKFILE if set, else
	// /run/xtables.lock, as iptables 1.8.9 does.
	LockFile string
	// LockWait bounds the wait for the lock (polled). Zero:
	// DefaultLockWait; negative: one try.
	LockWait time.Duration
	// Workers is how many goroutines encode rules. Zero: GOMAXPROCS.
	Workers int
	// KeepPolicyCounters: a built-in chain's policy the input does not
	// set keeps its counters across the write, as iptables 1.8.10 and
	// later do (their libiptc maps a policy read from the kernel like a
	// rule, where 1.8.9 and earlier zero it). Set it to get the result of
	// the iptables-legacy-restore that runs beside: false, 1.8.9's.
	KeepPolicyCounters bool
	// Lines, if set, types the input's lines as its writer wrote them, in
	// order (one Line per line, the last one ending at the input's end):
	// Restore and Verify then take a chain declaration's name and an -A's
	// chain and rule from it instead of splitting them out of the text.
	// It changes no result: a line whose Line does not describe its text
	// exactly is parsed as text, and so is the whole input when the Lines'
	// ends do not split it into its lines.
	Lines iter.Seq[Line]

	// newEncoder replaces NewEncoder (tests).
	newEncoder func(Family) ruleEncoder
	// beforeCommit runs before each table is written (tests).
	beforeCommit func(table string)
}

// Line types one line of an input (RestoreOptions.Lines): the line runs
// from the previous Line's End (0 for the first) to its own.
type Line struct {
	// End is the offset in the input just past the line's newline (or
	// the input's end, for a last line without one).
	End uint32
	// Kind is what the line does: LineDeclare ":CHAIN POLICY [p:b]",
	// LineAppend "-A CHAIN rule", LineOther anything else (parsed as
	// text).
	Kind LineKind
	// Name is the length of the chain's name, which starts right after
	// ":" or "-A ".
	Name uint8
}

// LineKind is what a Line does.
type LineKind uint8

// The kinds of Line.
const (
	LineOther LineKind = iota
	LineDeclare
	LineAppend
)

// parse is parseInput of data, or parseLines with o.Lines.
func (o *RestoreOptions) parse(fam Family, data []byte) *plan {
	if o.Lines == nil {
		return parseInput(fam, data)
	}
	return parseLines(fam, data, o.Lines)
}

// ruleEncoder is what Restore needs of an Encoder.
type ruleEncoder interface {
	AppendRule(dst []byte, rule []byte) ([]byte, RuleRef, error)
}

// RestoreError is a line of the input that failed, as
// iptables-restore's "line N failed"; it wraps ErrUnsupported for a line
// this package does not handle. Nothing was written.
type RestoreError struct {
	Line  int    // 1-based
	Table string // the table section it is in, "" outside one
	Err   error
}

func (e *RestoreError) Error() string {
	if e.Table == "" {
		return fmt.Sprintf("xtblob: line %d failed: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("xtblob: table %s: line %d failed: %v", e.Table, e.Line, e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// ErrPartial is matched (errors.Is) by Restore's error when the kernel
// refused a table after Restore had already replaced an earlier table of
// the same input (or replaced the table and then refused its counters):
// the input is applied in part. Replaying the input (through the tool or
// here) would apply its first tables twice (-I lines duplicated, -D lines
// failing); the caller must rather compare the tables with what it wants
// (an engine's full sync).
var ErrPartial = errors.New("xtblob: input applied in part")

// PartialError is a Restore that failed after writing some tables
// (errors.Is ErrPartial).
type PartialError struct {
	// Written are the tables replaced, in the order written.
	Written []string
	// Err is the failure that followed.
	Err error
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("xtblob: tables %s already written: %v", strings.Join(e.Written, ", "), e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPartial) true.
func (e *PartialError) Is(target error) bool { return target == ErrPartial }

// partial wraps err in a *PartialError when tables were written.
func partial(written []string, err error) error {
	if len(written) == 0 || err == nil {
		return err
	}
	return &PartialError{Written: append([]string(nil), written...), Err: err}
}

// The lines of an iptables-restore input.
const (
	opTable       = iota // *table
	opCommit             // COMMIT
	opChain              // :CHAIN POLICY [p:b]
	opAppend             // -A CHAIN rule
	opInsert             // -I CHAIN [n] rule
	opDelete             // -D CHAIN rule
	opDeleteNum          // -D CHAIN n
	opReplace            // -R CHAIN n rule
	opFlush              // -F [CHAIN]
	opNewChain           // -N CHAIN
	opDeleteChain        // -X [CHAIN]
	opPolicy             // -P CHAIN POLICY
	opFail               // a line that fails as it stands (err)
)

// span is a part of the input (its lines are at most maxLine long).
type span struct {
	off uint32
	n   uint16
}

// op is one line of input. Ops and encRules hold no pointers, so that
// the garbage collector has nothing to scan in the half million of them
// a large input makes.
type op struct {
	kind  uint8
	line  int32
	num   int32 // rule number, 1-based
	enc   int32 // index in plan.encs, -1
	chain span  // empty for "every chain"
	arg   span  // table name, policy
}

// encRule is a rule of the input and its encoding.
type encRule struct {
	text      span
	jump      span // the user chain it jumps to, if any
	src       uint16
	nat       bool // in the nat table (Encoder.Table)
	failed    bool // its error is in plan.encErr
	off, size uint32
}

// plan is a parsed input: its lines, then its encoded rules.
type plan struct {
	fam     Family
	data    []byte
	ops     []op
	encs    []encRule
	lineErr map[int32]error // the errors of opFail lines
	encErr  map[int32]error // the errors of rules that failed to encode
	tables  []string        // in order of first appearance
	// chains declared and rules added per table, to size its maps
	sizes  map[string]*[2]int
	arenas [][]byte // encoded entries, one per worker (table source 1+i)
}

// spanOf is where b, a part of the input, is in it.
func (p *plan) spanOf(b []byte) span {
	if len(b) == 0 {
		return span{}
	}
	return span{off: uint32(uintptr(unsafe.Pointer(&b[0])) - uintptr(unsafe.Pointer(&p.data[0]))), n: uint16(len(b))}
}

// str is the text of a span, aliasing the input.
func (p *plan) str(sp span) string {
	if sp.n == 0 {
		return ""
	}
	return unsafe.String(&p.data[sp.off], int(sp.n))
}

func (p *plan) bytesOf(sp span) []byte {
	return p.data[sp.off : sp.off+uint32(sp.n) : sp.off+uint32(sp.n)]
}

func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// field splits off the first space- or tab-separated word of s.
func field(s []byte) (word, rest []byte) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	s = s[i:]
	j := 0
	for j < len(s) && s[j] != ' ' && s[j] != '\t' {
		j++
	}
	return s[:j], s[j:]
}

func trimSpace(s []byte) []byte {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return s[i:]
}

// maxLine is iptables-restore's line buffer: a longer line is read as
// two, which this package does not imitate.
const maxLine = 10240 - 1

// parseInput splits data into its lines, as iptables-restore reads them.
// Lines that fail as they stand become opFail, so that errors surface in
// line order when the plan is applied. The plan aliases data.
func parseInput(fam Family, data []byte) *plan {
	ps := newParser(fam, data)
	line := 0
	sc := lines.New(data)
	for sc.Scan() {
		line++
		ps.line(line, sc.Line(), sc.Terminated(), Line{})
	}
	return ps.finish(line)
}

// parseLines is parseInput of data whose lines its writer typed (typed:
// RestoreOptions.Lines). A line typed as a declaration or an -A is read
// from its type; any other line, or one whose type does not describe its
// text exactly, is parsed as parseInput parses it, so the plan is
// parseInput's whatever typed says. Ends that do not split data into its
// lines (not after a newline, not increasing, not reaching its end) make
// it parseInput.
func parseLines(fam Family, data []byte, typed iter.Seq[Line]) *plan {
	ps := newParser(fam, data)
	line, start := 0, 0
	for t := range typed {
		end := int(t.End)
		if end <= start || end > len(data) || (data[end-1] != '\n' && end != len(data)) {
			return parseInput(fam, data)
		}
		l := data[start:end]
		nl := l[len(l)-1] == '\n'
		if nl {
			l = l[:len(l)-1]
		}
		if bytes.IndexByte(l, '\n') >= 0 {
			return parseInput(fam, data)
		}
		line++
		ps.line(line, l, nl, t)
		start = end
	}
	if start != len(data) {
		return parseInput(fam, data)
	}
	return ps.finish(line)
}

// parser builds a plan line by line.
type parser struct {
	p              *plan
	sizes          *[2]int
	inTable, inNAT bool
	seen           map[string]bool
}

func newParser(fam Family, data []byte) *parser {
	p := &plan{fam: fam, data: data, sizes: map[string]*[2]int{}, lineErr: map[int32]error{}, encErr: map[int32]error{}}
	p.ops = make([]op, 0, bytes.Count(data, []byte{'\n'})+1)
	p.encs = make([]encRule, 0, cap(p.ops))
	return &parser{p: p, seen: map[string]bool{}}
}

func (ps *parser) fail(line int, err error) {
	p := ps.p
	p.ops = append(p.ops, op{kind: opFail, line: int32(line), enc: -1})
	p.lineErr[int32(line)] = err
}

// finish ends the plan after its last line.
func (ps *parser) finish(line int) *plan {
	if ps.inTable {
		ps.fail(line+1, errors.New("COMMIT expected"))
	}
	return ps.p
}

// line adds line number line, l (without its newline; nl: it had one),
// typed as t (Line{}: not typed).
func (ps *parser) line(line int, l []byte, nl bool, t Line) {
	p := ps.p
	if len(l) >= maxLine {
		ps.fail(line, unsupportedf("a line of %d bytes", len(l)))
		return
	}
	if bytes.IndexByte(l, 0) >= 0 { // the tool's C strings end there
		ps.fail(line, unsupportedf("a NUL byte"))
		return
	}
	switch {
	case len(l) == 0 && nl:
		return
	case len(l) > 0 && l[0] == '#':
		return
	case ps.inTable && nl && string(l) == "COMMIT":
		p.ops = append(p.ops, op{kind: opCommit, line: int32(line), enc: -1})
		ps.inTable = false
		return
	case !ps.inTable && len(l) > 0 && l[0] == '*':
		name, _ := field(l[1:])
		if len(name) == 0 {
			ps.fail(line, errors.New("table name invalid"))
			return
		}
		if len(name) > 32 {
			name = name[:32]
		}
		t := bstr(name)
		if !ps.seen[t] {
			ps.seen[t] = true
			p.tables = append(p.tables, t)
			p.sizes[t] = new([2]int)
		}
		ps.sizes = p.sizes[t]
		ps.inNAT = t == "nat"
		p.ops = append(p.ops, op{kind: opTable, line: int32(line), enc: -1, arg: p.spanOf(name)})
		ps.inTable = true
		return
	case !ps.inTable:
		ps.fail(line, errors.New("not in a table section"))
		return
	case len(l) > 0 && l[0] == ':':
		var name, rest []byte
		if n := int(t.Name); t.Kind == LineDeclare && isWord(l, 1, n) {
			name, rest = l[1:1+n], l[1+n:]
		} else {
			name, rest = field(l[1:])
		}
		policy, rest := field(rest)
		_ = rest // counters: used only with --counters
		if len(name) == 0 {
			ps.fail(line, errors.New("chain name invalid"))
			return
		}
		o := op{kind: opChain, line: int32(line), enc: -1, chain: p.spanOf(name), arg: p.spanOf(policy)}
		p.ops = append(p.ops, o)
		ps.sizes[0]++
		return
	}
	n := len(p.encs)
	if c := int(t.Name); t.Kind == LineAppend && len(l) > 3 && l[0] == '-' && l[1] == 'A' && l[2] == ' ' && isWord(l, 3, c) && !strings.ContainsRune("-\"'!", rune(l[3])) {
		// what parseCommand makes of "-A CHAIN rule"
		p.ops = append(p.ops, op{kind: opAppend, line: int32(line), enc: int32(n), chain: p.spanOf(l[3 : 3+c])})
		p.encs = append(p.encs, encRule{text: p.spanOf(trimSpace(l[3+c:]))})
	} else {
		p.parseCommand(line, l)
	}
	ps.sizes[1] += len(p.encs) - n
	if ps.inNAT {
		for i := n; i < len(p.encs); i++ {
			p.encs[i].nat = true
		}
	}
}

// isWord reports whether l[at:at+n] is a word as field splits it: not
// empty, without a space or tab, and followed by one or by the line's end.
func isWord(l []byte, at, n int) bool {
	if n == 0 || at+n > len(l) || bytes.ContainsAny(l[at:at+n], " \t") {
		return false
	}
	return at+n == len(l) || l[at+n] == ' ' || l[at+n] == '\t'
}

// parseCommand parses a command line of a table section.
func (p *plan) parseCommand(line int, l []byte) {
	o := op{line: int32(line), enc: -1}
	fail := func(err error) {
		p.ops = append(p.ops, op{kind: opFail, line: int32(line), enc: -1})
		p.lineErr[int32(line)] = err
	}
	l = trimSpace(l)
	if len(l) > 0 && l[0] == '[' { // [pcnt:bcnt]: iptables-restore uses them only with --counters
		i := bytes.IndexByte(l, ']')
		if i < 0 {
			fail(errors.New("bad counters"))
			return
		}
		l = l[i+1:]
	}
	cmd, rest := field(l)
	var hasRule, hasNum, numOptional, chainOptional bool
	switch string(cmd) {
	case "-A", "--append":
		o.kind, hasRule = opAppend, true
	case "-I", "--insert":
		o.kind, hasRule, hasNum, numOptional = opInsert, true, true, true
	case "-D", "--delete":
		o.kind, hasRule, hasNum, numOptional = opDelete, true, true, true
	case "-R", "--replace":
		o.kind, hasRule, hasNum = opReplace, true, true
	case "-F", "--flush":
		o.kind, chainOptional = opFlush, true
	case "-N", "--new-chain":
		o.kind = opNewChain
	case "-X", "--delete-chain":
		o.kind, chainOptional = opDeleteChain, true
	case "-P", "--policy":
		o.kind = opPolicy
	default:
		fail(unsupportedf("command %q", cmd))
		return
	}
	name, rest := field(rest)
	if len(name) == 0 || name[0] == '-' {
		if !chainOptional || len(name) != 0 {
			fail(unsupportedf("%s without a chain", cmd))
			return
		}
	} else if name[0] == '"' || name[0] == '\'' || name[0] == '!' {
		fail(unsupportedf("chain name %s", name))
		return
	}
	o.chain = p.spanOf(name)
	if hasNum {
		w, r := field(rest)
		if len(w) > 0 && w[0] != '-' && w[0] != '!' {
			// iptables reads it with strtoul(base 0): hex, octal, a
			// sign are the tool's to judge; 0 and words are errors.
			n, err := strconv.ParseUint(string(w), 10, 31)
			switch {
			case len(w) == 1 && w[0] == '0', err != nil && !isNumberish(w):
				fail(fmt.Errorf("invalid rule number `%s'", w))
				return
			case err != nil || w[0] == '0':
				fail(unsupportedf("rule number %q", w))
				return
			}
			o.num = int32(n)
			rest = r
			if o.kind == opDelete {
				o.kind, hasRule = opDeleteNum, false
			}
		} else if !numOptional {
			fail(fmt.Errorf("%s needs a rule number", cmd))
			return
		} else if o.kind == opInsert {
			o.num = 1
		}
	}
	switch {
	case o.kind == opPolicy:
		pol, r := field(rest)
		if len(pol) == 0 || len(trimSpace(r)) != 0 {
			fail(unsupportedf("-P %s %s", name, rest))
			return
		}
		o.arg = p.spanOf(pol)
	case hasRule:
		o.enc = int32(len(p.encs))
		p.encs = append(p.encs, encRule{text: p.spanOf(trimSpace(rest))})
	default:
		if len(trimSpace(rest)) != 0 {
			fail(unsupportedf("%s %s with %q", cmd, name, trimSpace(rest)))
			return
		}
	}
	p.ops = append(p.ops, o)
}

// encode encodes every rule of the plan, on workers goroutines, each
// into an arena of its own.
func (p *plan) encode(workers int, newEnc func(Family) ruleEncoder) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if newEnc == nil {
		newEnc = func(f Family) ruleEncoder { return NewEncoder(f) }
	}
	n := len(p.encs)
	if n < 2048 {
		workers = 1
	}
	if workers > n/1024+1 {
		workers = n/1024 + 1
	}
	p.arenas = make([][]byte, workers)
	errs := make([]map[int32]error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.arenas[w], errs[w] = p.encodeRange(newEnc(p.fam), lo, hi, uint16(w+1))
		}()
	}
	wg.Wait()
	for _, m := range errs {
		for i, err := range m {
			p.encErr[i] = err
		}
	}
}

// maxEntry is the largest entry (next_offset is 16 bits): an arena keeps
// that much room free before each rule, so that AppendRule never has to
// move it.
const maxEntry = 1 << 16

// encodeRange encodes rules lo to hi into an arena of their own (table
// source src), returning it and the errors of the rules that failed.
func (p *plan) encodeRange(enc ruleEncoder, lo, hi int, src uint16) ([]byte, map[int32]error) {
	encs := p.encs[lo:hi]
	text := 0
	for i := range encs {
		text += int(encs[i].text.n)
	}
	var errs map[int32]error
	failed := func(i int, err error) {
		if errs == nil {
			errs = map[int32]error{}
		}
		errs[int32(lo+i)] = err
		encs[i].failed = true
	}
	// the engines' rules encode to about twice their text (70 MB for the
	// 33 MB cold start of 10,000 services; a comment match alone is 288
	// bytes), and the arena grows (doubling) past what is reserved here.
	// It is touched as it fills, but a kernel that does not overcommit
	// counts all of it.
	a := newArena(3*text + 2*maxEntry)
	real, _ := enc.(*Encoder)
	for i := range encs {
		e := &encs[i]
		if real != nil {
			// iptables' checks that depend on the table (-j DROP in nat)
			real.Table = ""
			if e.nat {
				real.Table = "nat"
			}
		}
		a.reserve(maxEntry)
		start := len(a.buf)
		text := p.bytesOf(e.text)
		out, ref, err := enc.AppendRule(a.buf, text)
		if err != nil {
			failed(i, err)
			continue
		}
		if len(out) > start && &out[start] != &a.buf[:start+1][start] {
			// the encoder moved the buffer (an entry over maxEntry?)
			failed(i, fmt.Errorf("xtblob: the encoder outgrew its buffer"))
			continue
		}
		a.buf = a.buf[:len(out)]
		e.src, e.off, e.size = src, uint32(start), uint32(len(out)-start)
		if len(ref.Jump) > 0 {
			j := ^uintptr(0)
			if len(text) > 0 {
				j = uintptr(unsafe.Pointer(&ref.Jump[0])) - uintptr(unsafe.Pointer(&text[0]))
			}
			if j > uintptr(len(text)) || j+uintptr(len(ref.Jump)) > uintptr(len(text)) {
				failed(i, fmt.Errorf("xtblob: the encoder's jump does not alias the rule"))
				continue
			}
			e.jump = span{off: e.text.off + uint32(j), n: uint16(len(ref.Jump))}
		}
	}
	return a.buf, errs
}

// arena is a growing buffer outside the Go heap where one can be had.
type arena struct {
	buf []byte
}

func newArena(n int) *arena { return &arena{buf: allocBig(n)[:0]} }

// reserve makes room for n more bytes, moving the buffer if needed.
func (a *arena) reserve(n int) {
	if cap(a.buf)-len(a.buf) >= n {
		return
	}
	nb := allocBig(2*cap(a.buf) + n)[:len(a.buf)]
	copy(nb, a.buf)
	freeBig(a.buf[:cap(a.buf)])
	a.buf = nb
}

func (p *plan) free() {
	for i, a := range p.arenas {
		if cap(a) > 0 {
			freeBig(a[:cap(a)])
		}
		p.arenas[i] = nil
	}
}

// tableSource reads a table from the kernel.
type tableSource func(name string) (*table, error)

// apply runs the plan's lines in order on the tables (read through read
// when first named), as iptables-restore --noflush would; only the
// sections of table only when it is not empty. The first failing line
// ends it with a *RestoreError.
func (p *plan) apply(tables map[string]*table, read tableSource, only string) error {
	var t *table
	cur := ""
	skip := false
	for i := range p.ops {
		o := &p.ops[i]
		if o.kind == opTable {
			cur = p.str(o.arg)
			skip = only != "" && cur != only
			if skip {
				continue
			}
			t = tables[cur]
			if t == nil {
				var err error
				if t, err = read(cur); err != nil {
					return &RestoreError{Line: int(o.line), Table: cur, Err: err}
				}
				if sz := p.sizes[cur]; sz != nil {
					t.reserve(sz[0], sz[1])
				}
				for _, a := range p.arenas {
					t.srcs = append(t.srcs, a)
				}
				tables[cur] = t
			}
			continue
		}
		if o.kind == opCommit {
			cur, t = "", nil
			continue
		}
		if skip {
			continue
		}
		if err := p.applyOp(t, o); err != nil {
			return &RestoreError{Line: int(o.line), Table: cur, Err: err}
		}
	}
	return nil
}

var (
	errNoChain  = errors.New("no chain/target/match by that name")
	errExists   = errors.New("chain already exists")
	errBuiltin  = errors.New("can't delete built-in chain")
	errRefs     = errors.New("can't delete chain with references left")
	errNotEmpty = errors.New("chain is not empty")
	errIndex    = errors.New("index too big")
	errNoRule   = errors.New("bad rule (does a matching rule exist in that chain?)")
	errPolicy   = errors.New("bad policy name")
	errPolChain = errors.New("bad built-in chain name")
)

func isVerdictName(s string) bool {
	return s == "ACCEPT" || s == "DROP" || s == "QUEUE" || s == "RETURN"
}

func (p *plan) applyOp(t *table, o *op) error {
	if o.kind == opFail {
		return p.lineErr[o.line]
	}
	chain, arg := p.str(o.chain), p.str(o.arg)
	if len(chain) >= chainNameLimit {
		return fmt.Errorf("invalid chain name `%s' (%d chars max)", chain, chainNameLimit-1)
	}
	switch o.kind {
	case opChain:
		if arg == "" {
			return errors.New("policy invalid")
		}
		ci, ok := t.lookup(chain)
		switch {
		case ok && t.chains[ci].hook >= 0:
			// a built-in chain is neither flushed nor created: with
			// policy "-" the line changes nothing, and a section of
			// such lines commits nothing (libiptc's changed flag).
		case ok:
			t.flush(ci)
			t.changed = true
		default:
			if isVerdictName(chain) {
				return fmt.Errorf("error creating chain '%s': %w", chain, errExists)
			}
			ci = t.addChain(chain, -1)
			t.changed = true
		}
		if arg != "-" {
			t.changed = true
			// iptables-restore sets the policy's counters: to [p:b]
			// with --counters, to zero without.
			return t.setPolicy(chain, arg, ctrSet)
		}
		return nil
	case opPolicy:
		t.changed = true
		return t.setPolicy(chain, arg, ctrNone)
	case opNewChain:
		if chain[0] == '!' {
			return fmt.Errorf("chain name not allowed to start with `!'")
		}
		if _, ok := t.lookup(chain); ok || isVerdictName(chain) {
			return errExists
		}
		if isTargetName(p.fam, chain) {
			return errors.New("chain name may not clash with target name")
		}
		t.addChain(chain, -1)
		t.changed = true
		return nil
	case opFlush:
		t.changed = true
		if chain == "" {
			for i := range t.chains {
				if !t.chains[i].deleted {
					t.flush(int32(i))
				}
			}
			return nil
		}
		ci, ok := t.lookup(chain)
		if !ok {
			return errNoChain
		}
		t.flush(ci)
		return nil
	case opDeleteChain:
		t.changed = true
		if chain == "" {
			for i := range t.chains {
				c := &t.chains[i]
				if c.deleted || c.hook >= 0 {
					continue
				}
				if c.n > 0 {
					return fmt.Errorf("%s: %w", c.name, errNotEmpty)
				}
				if c.refs > 0 {
					return fmt.Errorf("%s: %w", c.name, errRefs)
				}
			}
			for i := range t.chains {
				if c := &t.chains[i]; !c.deleted && c.hook < 0 {
					t.deleteChain(int32(i))
				}
			}
			return nil
		}
		ci, ok := t.lookup(chain)
		switch {
		case !ok:
			return errNoChain
		case t.chains[ci].hook >= 0:
			return errBuiltin
		case t.chains[ci].refs > 0:
			return errRefs
		case t.chains[ci].n > 0:
			return errNotEmpty
		}
		t.deleteChain(ci)
		return nil
	case opDeleteNum:
		ci, ok := t.lookup(chain)
		if !ok {
			return errNoChain
		}
		if o.num > t.chains[ci].n {
			return errIndex
		}
		t.removeNth(ci, o.num)
		t.changed = true
		return nil
	}
	// the commands with a rule
	e := &p.encs[o.enc]
	// iptables refuses an interface the hook never has, by the chain's
	// name, whatever the table (an option it sees: "-o +" too).
	switch chain {
	case "PREROUTING", "INPUT":
		if hasOption(p.bytesOf(e.text), "-o", "--out-interface") {
			return fmt.Errorf("can't use -o with %s", chain)
		}
	case "POSTROUTING", "OUTPUT":
		if hasOption(p.bytesOf(e.text), "-i", "--in-interface") {
			return fmt.Errorf("can't use -i with %s", chain)
		}
	}
	if e.failed {
		return p.encErr[o.enc]
	}
	r, err := t.newRule(e, p.str(e.jump))
	if err != nil {
		return err
	}
	ci, ok := t.lookupCommand(chain)
	if !ok {
		return errNoChain
	}
	switch o.kind {
	case opAppend:
		t.appendRule(ci, r)
	case opInsert:
		if o.num-1 > t.chains[ci].n {
			return errIndex
		}
		t.insertRule(ci, o.num-1, r)
	case opReplace:
		if o.num > t.chains[ci].n {
			return errIndex
		}
		t.removeNth(ci, o.num)
		t.insertRule(ci, o.num-1, r)
	case opDelete:
		prev := int32(-1)
		found := false
		for q := t.chains[ci].first; q >= 0; prev, q = q, t.rules[q].next {
			if t.sameRule(&r, &t.rules[q]) {
				found = true
				break
			}
		}
		if !found {
			return errNoRule
		}
		t.removeRule(ci, prev)
		t.changed = true
		return nil
	}
	if r.kind == kindJump {
		t.chains[r.jump].refs++
	}
	t.changed = true
	return nil
}

func (t *table) setPolicy(name, policy string, mode uint8) error {
	ci, ok := t.lookup(name)
	if !ok || t.chains[ci].hook < 0 {
		return fmt.Errorf("can't set policy `%s' on `%s': %w", policy, name, errPolChain)
	}
	c := &t.chains[ci]
	switch policy {
	case "ACCEPT":
		c.verdict = verdictAccept
	case "DROP":
		c.verdict = verdictDrop
	default:
		return fmt.Errorf("can't set policy `%s' on `%s': %w", policy, name, errPolicy)
	}
	c.polCtrMode = mode
	c.polCtr = [2]uint64{}
	return nil
}

func (t *table) deleteChain(ci int32) {
	c := &t.chains[ci]
	c.deleted = true
	delete(t.byName, c.name)
	t.nUser--
}

// newRule makes the rule of an encoded entry, mapping its target as
// libiptc does: a user chain's name to a jump, a verdict's name to the
// verdict. The rule is not counted as a reference yet.
func (t *table) newRule(e *encRule, jump string) (tableRule, error) {
	lay := t.lay
	ent := t.srcs[e.src][e.off : e.off+e.size]
	to := u16(ent[lay.targetOffsetAt:])
	tg := ent[to:]
	r := tableRule{next: -1, jump: -1, oldIdx: -1, off: e.off, size: e.size, src: e.src}
	if jump != "" {
		ci, ok := t.lookup(jump)
		if !ok {
			return r, fmt.Errorf("couldn't load target `%s': %w", jump, errNoChain)
		}
		if t.chains[ci].hook >= 0 {
			return r, fmt.Errorf("can't jump to built-in chain %s", jump)
		}
		if u16(tg) != standardSize {
			return r, fmt.Errorf("xtblob: the jump to %s has a target of %d bytes", jump, u16(tg))
		}
		r.kind, r.jump = kindJump, ci
		return r, nil
	}
	name := cstring(tg[targetNameAt : targetNameAt+targetNameLen])
	v := int32(0)
	switch name {
	case "":
		if u16(tg) != standardSize {
			return r, unsupportedf("a standard target of %d bytes", u16(tg))
		}
		if i32(tg[targetHeader:]) < 0 {
			r.kind = kindStandard
		} else {
			r.kind = kindFallthrough
		}
		return r, nil
	case "ACCEPT":
		v = verdictAccept
	case "DROP":
		v = verdictDrop
	case "QUEUE":
		v = verdictQueue
	case "RETURN":
		v = verdictReturn
	default:
		r.kind = kindModule
		return r, nil
	}
	if u16(tg) != standardSize {
		return r, unsupportedf("a %s target of %d bytes", name, u16(tg))
	}
	clear(tg[targetNameAt : targetRevAt+1])
	binaryPutI32(tg[targetHeader:], v)
	r.kind = kindStandard
	return r, nil
}

// sameRule reports whether rule a (new, not yet in the table) is the one
// b, as libiptc's delete compares them: heads, matches and targets byte
// for byte (the kernel clears what it keeps for itself on readback, as
// iptables' masks do), jumps by the chain they go to.
func (t *table) sameRule(a, b *tableRule) bool {
	if a.size != b.size || a.kind != b.kind {
		return false
	}
	lay := t.lay
	ea, eb := t.entry(a), t.entry(b)
	if !bytes.Equal(ea[:lay.comefromAt], eb[:lay.comefromAt]) {
		return false
	}
	to := u16(ea[lay.targetOffsetAt:])
	if !bytes.Equal(ea[lay.entrySize:to], eb[lay.entrySize:to]) {
		return false
	}
	switch a.kind {
	case kindJump:
		return a.jump == b.jump
	case kindFallthrough:
		return true
	case kindStandard:
		return i32(ea[to+targetHeader:]) == i32(eb[to+targetHeader:])
	}
	return bytes.Equal(ea[to:], eb[to:])
}

func binaryPutI32(b []byte, v int32) { binary.NativeEndian.PutUint32(b, uint32(v)) }

// isTargetName reports whether iptables would load name as a target
// extension (it refuses such names for -N): a libxt_NAME.so, or the
// family's libipt_/libip6t_ one, in $XTABLES_LIBDIR or the usual places.
func isTargetName(fam Family, name string) bool {
	if strings.ContainsRune(name, '/') {
		return false
	}
	dirs := []string{"/usr/lib/x86_64-linux-gnu/xtables", "/usr/lib/aarch64-linux-gnu/xtables",
		"/usr/lib64/xtables", "/usr/lib/xtables", "/usr/libexec/xtables"}
	if env := os.Getenv("XTABLES_LIBDIR"); env != "" {
		dirs = filepath.SplitList(env)
	}
	fp := "libipt_"
	if fam == IPv6 {
		fp = "libip6t_"
	}
	for _, d := range dirs {
		for _, f := range [2]string{"libxt_", fp} {
			if _, err := os.Stat(filepath.Join(d, f+name+".so")); err == nil {
				return true
			}
		}
	}
	return false
}

// hasOption reports whether a rule's text has the option short or long
// among its words (outside double quotes).
func hasOption(text []byte, short, long string) bool {
	in := false
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '"':
			in = !in
			i++
		case in || c == ' ' || c == '\t':
			i++
		default:
			j := i
			for j < len(text) && text[j] != ' ' && text[j] != '\t' && text[j] != '"' {
				j++
			}
			if w := string(text[i:j]); w == short || w == long {
				return true
			}
			i = j
		}
	}
	return false
}

// isNumberish reports whether strtoul might read a number from w.
func isNumberish(w []byte) bool {
	return len(w) > 0 && (w[0] >= '0' && w[0] <= '9' || w[0] == '+')
}
