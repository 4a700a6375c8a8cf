package xtables

import (
	"iter"

	"github.com/svcproxy/svcproxy/internal/xtblob"
)

// RestoreInput is what Runner.Restore takes: an iptables-restore input
// as its writer rendered it, the text and, when the writer typed them,
// its lines (Ops). A caller with plain text leaves Ops empty
// (RestoreInput{Text: data}); an engine that builds its input line by
// line types it at no cost (the iptables engine's payloads), and a Runner
// that applies the input itself (the legacy backend's in-process writer)
// then reads the lines' kinds and chains from Ops instead of parsing the
// text back. Either way the result is the same.
type RestoreInput struct {
	// Text is the iptables-restore input.
	Text []byte
	// Ops types Text's lines, one each, in order; nil or empty: none are
	// typed. They must be what the lines are (the iptables engine's tests
	// type every payload's text again and compare); a Runner may read
	// either.
	Ops []RestoreOp
}

// RestoreOp is one line of a RestoreInput, typed. It holds offsets into
// the text, not the text (8 bytes: a large restore has hundreds of
// thousands of lines). The line runs from the previous op's End (0 for
// the first) to its own End; its Name starts right after its kind's
// prefix ("*", ":", "-A ", "-I ", "-D ", "-X ").
type RestoreOp struct {
	// End is the offset in the text just past the line's newline.
	End uint32
	// Target is the offset in the line of a rule's jump (-j) or goto (-g)
	// target, which runs to the next space or the line's end; 0: none.
	Target uint16
	// Kind is what the line does.
	Kind RestoreOpKind
	// Name is the length of the table's or chain's name (0 for
	// RestoreOther and RestoreCommit).
	Name uint8
}

// RestoreOpKind is what one line of an iptables-restore input does.
type RestoreOpKind uint8

// The kinds of RestoreOp.
const (
	// RestoreOther is a line of no kind below (a comment, an empty line,
	// a command not typed); a Runner parses it from the text.
	RestoreOther RestoreOpKind = iota
	// RestoreTable starts a table's section: "*nat".
	RestoreTable
	// RestoreCommit ends it: "COMMIT".
	RestoreCommit
	// RestoreDeclare creates a chain, or flushes it if it exists:
	// ":CHAIN - [0:0]".
	RestoreDeclare
	// RestoreAppend, RestoreInsert and RestoreDelete add a rule at the
	// end of its chain, add it first, or delete it: "-A CHAIN spec",
	// "-I", "-D".
	RestoreAppend
	RestoreInsert
	RestoreDelete
	// RestoreDeleteChain deletes a chain: "-X CHAIN".
	RestoreDeleteChain
)

// xtblobLines hands ops to the in-process writer as the lines it reads
// (xtblob.RestoreOptions.Lines): declarations and appends typed, every
// other line parsed from the text.
func xtblobLines(ops []RestoreOp) iter.Seq[xtblob.Line] {
	return func(yield func(xtblob.Line) bool) {
		for _, o := range ops {
			l := xtblob.Line{End: o.End}
			switch o.Kind {
			case RestoreDeclare:
				l.Kind, l.Name = xtblob.LineDeclare, o.Name
			case RestoreAppend:
				l.Kind, l.Name = xtblob.LineAppend, o.Name
			}
			if !yield(l) {
				return
			}
		}
	}
}
