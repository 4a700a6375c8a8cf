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
// chunker (splitPayloadEach), the digest bookkeeping after a restore
// (applyPayload) and the Runner, which gets both
// (xtables.RestoreInput's Text and Ops): the legacy backend's in-process writer
// reads the ops, the iptables-restore tools the text (and a chunk, which
// only the tools get, is text alone).

// opKind is what one payload line does; restoreOp is one line of a
// payload, typed: xtables' types, which the Runner reads
// (RestoreInput.Ops). An op holds offsets, not the text (a large full
// sync writes hundreds of thousands of lines: BenchmarkSyncFull): the
// line starts where the previous op ends, its name (the table, or the
// chain) right after the kind's prefix ("*", ":", "-A ").
type (
	opKind    = xtables.RestoreOpKind
	restoreOp = xtables.RestoreOp
)

const (
	opOther       = xtables.RestoreOther
	opTable       = xtables.RestoreTable
	opCommit      = xtables.RestoreCommit
	opDeclare     = xtables.RestoreDeclare
	opAppend      = xtables.RestoreAppend
	opInsert      = xtables.RestoreInsert
	opDelete      = xtables.RestoreDelete
	opDeleteChain = xtables.RestoreDeleteChain
)

// nameAt is the offset in the line of an op's name.
func nameAt(k opKind) int {
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
	at := nameAt(o.Kind)
	return line[at : at+int(o.Name)]
}

// opSpec returns a rule's matches and target: the line after "-A CHAIN ".
func opSpec(line []byte, o restoreOp) []byte {
	at := 3 + int(o.Name) + 1
	if at >= len(line) {
		return nil
	}
	return line[at:]
}

// opTarget returns a rule's jump target (nil: none).
func opTarget(line []byte, o restoreOp) []byte {
	if o.Target == 0 {
		return nil
	}
	t, _ := splitChain(line[o.Target:])
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
	o := restoreOp{End: uint32(end)}
	switch {
	case len(line) > 1 && line[0] == '*':
		o.Kind, o.Name = opTable, uint8(min(len(line)-1, 255))
	case bytes.Equal(line, []byte("COMMIT")):
		o.Kind = opCommit
	case len(line) > 1 && line[0] == ':':
		name := line[1:]
		if j := bytes.IndexByte(name, ' '); j >= 0 {
			name = name[:j]
		}
		o.Kind, o.Name = opDeclare, uint8(min(len(name), 255))
	case len(line) > 3 && line[0] == '-' && line[2] == ' ':
		switch line[1] {
		case 'A':
			o.Kind = opAppend
		case 'I':
			o.Kind = opInsert
		case 'D':
			o.Kind = opDelete
		case 'X':
			o.Kind = opDeleteChain
		default:
			return o
		}
		chain, _ := splitChain(line[3:])
		if o.Kind == opDeleteChain {
			chain = bytes.TrimSpace(line[3:])
		}
		if len(chain) > 255 {
			return restoreOp{End: uint32(end)}
		}
		o.Name = uint8(len(chain))
		if o.Kind != opDeleteChain {
			o.Target = findTarget(line)
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
				start = int(want[i-1].End)
			}
			end := min(start+200, len(pl.text))
			return fmt.Sprintf("op %d of %d (%d typed): %+v, typed from the text %+v; text from there: %q", i, len(pl.ops), len(want), got, exp, pl.text[start:end])
		}
	}
	return ""
}
