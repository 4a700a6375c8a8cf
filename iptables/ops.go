package iptables

import (
	"bytes"
	"fmt"
	"math"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// A payload is rendered once, as text and as typed operations side by
// side: the lineWriter that appends a line records what it is (a table
// header, a chain declaration, a rule appended, inserted or deleted in a
// chain, a chain deleted, a COMMIT), its chain and, for a rule, where its
// jump target lies in the line. Everything after the render that needs
// the payload's structure reads the operations instead of parsing the
// text back: the chain compare of a full sync (reducePayload), the
// chunker (splitPayloadEach) and the digest bookkeeping after a restore
// (applyPayload). The text is what the Runner is given
// (xtables.Runner.Restore takes iptables-restore input).

// opKind is what one payload line does.
type opKind uint8

const (
	// opOther is a line of no kind below (a comment, an empty line, a
	// command the readers do not follow).
	opOther opKind = iota
	// opTable starts a table's section: "*nat".
	opTable
	// opCommit ends it: "COMMIT".
	opCommit
	// opDeclare creates a chain, or flushes it if it exists: ":CHAIN - [0:0]".
	opDeclare
	// opAppend, opInsert and opDelete add a rule at the end of its chain,
	// add it first, or delete it: "-A CHAIN spec", "-I", "-D".
	opAppend
	opInsert
	opDelete
	// opDeleteChain deletes a chain: "-X CHAIN".
	opDeleteChain
)

// restoreOp is one line of a payload, typed. It holds offsets, not the
// text (a large full sync writes hundreds of thousands of lines:
// BenchmarkSyncFull): the line starts where the previous op ends, its
// name (the table, or the chain) right after the kind's prefix ("*",
// ":", "-A ").
type restoreOp struct {
	// end is the offset just past the line's newline.
	end uint32
	// target is the offset in the line of the rule's jump (-j) or goto
	// (-g) target, which runs to the next space or the line's end; 0:
	// none. (iptables-restore takes no line near 64 KiB long.)
	target uint16
	kind   opKind
	// name is the length of the name.
	name uint8
}

// nameAt is the offset in the line of an op's name.
func (k opKind) nameAt() int {
	switch k {
	case opTable, opDeclare:
		return 1
	case opAppend, opInsert, opDelete, opDeleteChain:
		return 3
	}
	return 0
}

// opName returns the table or chain of the op whose line is line.
func opName(line []byte, o restoreOp) []byte {
	at := o.kind.nameAt()
	return line[at : at+int(o.name)]
}

// opSpec returns a rule's matches and target: the line after "-A CHAIN ".
func opSpec(line []byte, o restoreOp) []byte {
	at := 3 + int(o.name) + 1
	if at >= len(line) {
		return nil
	}
	return line[at:]
}

// opTarget returns a rule's jump target (nil: none).
func opTarget(line []byte, o restoreOp) []byte {
	if o.target == 0 {
		return nil
	}
	t, _ := splitChain(line[o.target:])
	return t
}

// restorePayload is a rendered payload: its text and its operations, one
// per line, in order.
type restorePayload struct {
	text []byte
	ops  []restoreOp
}

func (p restorePayload) empty() bool { return len(p.text) == 0 }

// typeLine types one line (without its newline) that was written as
// text: the fixed rules and the tail, and payloads built outside the
// renderer (tests).
func typeLine(line []byte, end int) restoreOp {
	o := restoreOp{end: uint32(end)}
	switch {
	case len(line) > 1 && line[0] == '*':
		o.kind, o.name = opTable, uint8(min(len(line)-1, 255))
	case bytes.Equal(line, []byte("COMMIT")):
		o.kind = opCommit
	case len(line) > 1 && line[0] == ':':
		name := line[1:]
		if j := bytes.IndexByte(name, ' '); j >= 0 {
			name = name[:j]
		}
		o.kind, o.name = opDeclare, uint8(min(len(name), 255))
	case len(line) > 3 && line[0] == '-' && line[2] == ' ':
		switch line[1] {
		case 'A':
			o.kind = opAppend
		case 'I':
			o.kind = opInsert
		case 'D':
			o.kind = opDelete
		case 'X':
			o.kind = opDeleteChain
		default:
			return o
		}
		chain, _ := splitChain(line[3:])
		if o.kind == opDeleteChain {
			chain = bytes.TrimSpace(line[3:])
		}
		if len(chain) > 255 {
			return restoreOp{end: uint32(end)}
		}
		o.name = uint8(len(chain))
		if o.kind != opDeleteChain {
			o.target = findTarget(line)
		}
	}
	return o
}

// findTarget finds the jump or goto target of a rule line written without
// lineWriter.jump.
func findTarget(line []byte) uint16 {
	i := bytes.LastIndex(line, []byte(" -j "))
	if i < 0 {
		i = bytes.LastIndex(line, []byte(" -g "))
	}
	if i < 0 || i+4 >= len(line) || i+4 > math.MaxUint16 {
		return 0
	}
	return uint16(i + 4)
}

// typePayload types every line of a payload written as text (tests, and
// payloads not from the renderer).
func typePayload(text []byte) restorePayload {
	if len(text) > 0 && text[len(text)-1] != '\n' {
		// The readers take every line as ending in a newline.
		text = append(text[:len(text):len(text)], '\n')
	}
	var ops []restoreOp
	sc := lines.New(text)
	for sc.Scan() {
		ops = append(ops, typeLine(sc.Line(), sc.End()))
	}
	return restorePayload{text: text, ops: ops}
}

// sectionTable returns the table of an opTable line.
func sectionTable(line []byte, o restoreOp) xtables.Table {
	return xtables.Table(opName(line, o))
}

// checkOps makes every sync check that its payload's ops are those its
// text types to (the package's tests set it; benchmarks do not).
var checkOps bool

// opsMismatch reports where pl's ops differ from those typed from its
// text ("" when they agree).
func opsMismatch(pl restorePayload) string {
	want := typePayload(pl.text).ops
	if len(pl.text) > 0 && pl.text[len(pl.text)-1] != '\n' {
		return "the text does not end in a newline"
	}
	for i := range max(len(want), len(pl.ops)) {
		if i >= len(want) || i >= len(pl.ops) || want[i] != pl.ops[i] {
			var got, exp restoreOp
			if i < len(pl.ops) {
				got = pl.ops[i]
			}
			if i < len(want) {
				exp = want[i]
			}
			start := 0
			if i > 0 && i-1 < len(want) {
				start = int(want[i-1].end)
			}
			end := min(start+200, len(pl.text))
			return fmt.Sprintf("op %d of %d (%d typed): %+v, typed from the text %+v; text from there: %q", i, len(pl.ops), len(want), got, exp, pl.text[start:end])
		}
	}
	return ""
}
