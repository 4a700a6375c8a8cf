package iptables

import (
	"math"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// lineWriter appends iptables-restore lines to a reused byte slice without
// formatting through fmt (a full sync at 10,000 services writes ~400,000
// lines, so every allocation per line shows), and types each line as it
// goes (ops, one per line: ops.go).
type lineWriter struct {
	buf   []byte
	lines int
	ops   []restoreOp
	// cur is the op of the line being written, from offset start.
	cur   restoreOp
	start int
}

func (w *lineWriter) reset() {
	w.buf = w.buf[:0]
	w.lines = 0
	w.ops = w.ops[:0]
}

// begin starts a line of kind on name.
func (w *lineWriter) begin(kind opKind, name string) {
	w.start = len(w.buf)
	w.cur = restoreOp{Kind: kind, Name: uint8(len(name))}
	if len(name) > 255 {
		w.cur = restoreOp{}
	}
}

// rule starts "-A chain".
func (w *lineWriter) rule(chain xtables.Chain) *lineWriter {
	w.begin(opAppend, string(chain))
	w.buf = append(w.buf, "-A "...)
	w.buf = append(w.buf, chain...)
	return w
}

// op starts "<op> chain", op being -A, -I, -D or -X.
func (w *lineWriter) op(op string, chain xtables.Chain) *lineWriter {
	kind := opOther
	switch op {
	case "-A":
		kind = opAppend
	case "-I":
		kind = opInsert
	case "-D":
		kind = opDelete
	case "-X":
		kind = opDeleteChain
	}
	w.begin(kind, string(chain))
	w.buf = append(w.buf, op...)
	w.buf = append(w.buf, ' ')
	w.buf = append(w.buf, chain...)
	return w
}

// w appends " word" for each word.
func (w *lineWriter) w(words ...string) *lineWriter {
	for _, s := range words {
		w.buf = append(w.buf, ' ')
		w.buf = append(w.buf, s...)
	}
	return w
}

// int appends " n".
func (w *lineWriter) int(n int) *lineWriter {
	w.buf = append(w.buf, ' ')
	w.buf = strconv.AppendInt(w.buf, int64(n), 10)
	return w
}

// comment appends a comment match; text parts are concatenated and the
// whole quoted when it holds a space, as iptables-save prints it.
func (w *lineWriter) comment(parts ...string) *lineWriter {
	w.buf = append(w.buf, " -m comment --comment "...)
	quote := false
	for _, p := range parts {
		if strings.IndexByte(p, ' ') >= 0 {
			quote = true
			break
		}
	}
	if quote {
		w.buf = append(w.buf, '"')
	}
	for _, p := range parts {
		w.buf = append(w.buf, p...)
	}
	if quote {
		w.buf = append(w.buf, '"')
	}
	return w
}

// proto appends "-m proto -p proto".
func (w *lineWriter) proto(p string) *lineWriter {
	w.buf = append(w.buf, " -m "...)
	w.buf = append(w.buf, p...)
	w.buf = append(w.buf, " -p "...)
	w.buf = append(w.buf, p...)
	return w
}

// jump appends "-j target" and ends the line.
func (w *lineWriter) jump(target string) {
	w.buf = append(w.buf, " -j "...)
	w.setTarget(target)
	w.buf = append(w.buf, target...)
	w.end()
}

// jumpWith appends "-j target" and the target's options, and ends the
// line.
func (w *lineWriter) jumpWith(target string, opts ...string) {
	w.buf = append(w.buf, " -j "...)
	w.setTarget(target)
	w.buf = append(w.buf, target...)
	w.w(opts...)
	w.end()
}

// setTarget notes that the target starts at the end of the buffer.
func (w *lineWriter) setTarget(target string) {
	if at := len(w.buf) - w.start; at <= math.MaxUint16 {
		w.cur.Target = uint16(at)
	}
}

// end ends the line and records its op. A rule written without jump
// (its target among the words) has its target found here.
func (w *lineWriter) end() {
	if w.cur.Target == 0 && w.cur.Kind >= opAppend && w.cur.Kind <= opDelete {
		w.cur.Target = findTarget(w.buf[w.start:])
	}
	w.buf = append(w.buf, '\n')
	w.lines++
	w.cur.End = uint32(len(w.buf))
	w.ops = append(w.ops, w.cur)
	w.cur = restoreOp{}
	w.start = len(w.buf)
}

// raw appends a whole line (without its newline), typed from its text.
func (w *lineWriter) raw(line string) {
	start := len(w.buf)
	w.buf = append(w.buf, line...)
	w.buf = append(w.buf, '\n')
	w.lines++
	w.ops = append(w.ops, typeLine(w.buf[start:len(w.buf)-1], len(w.buf)))
	w.cur = restoreOp{}
	w.start = len(w.buf)
}

// chainLine appends ":chain - [0:0]", which creates the chain, or flushes
// it when it exists (iptables-restore --noflush).
func (w *lineWriter) chainLine(chain xtables.Chain) {
	w.begin(opDeclare, string(chain))
	w.buf = append(w.buf, ':')
	w.buf = append(w.buf, chain...)
	w.buf = append(w.buf, " - [0:0]"...)
	w.end()
}

// appendWriter appends what src wrote to w, its ops moved to their new
// offsets.
func (w *lineWriter) appendWriter(src *lineWriter) {
	base := uint32(len(w.buf))
	w.buf = append(w.buf, src.buf...)
	w.lines += src.lines
	n := len(w.ops)
	w.ops = append(w.ops, src.ops...)
	for i := n; i < len(w.ops); i++ {
		w.ops[i].End += base
	}
	w.start = len(w.buf)
}

// spec is a helper that renders one rule's match+target (no "-A chain")
// into a string, for the rules a service puts into the shared chains.
type specBuilder struct{ lineWriter }

func (b *specBuilder) start() *lineWriter {
	b.buf = b.buf[:0]
	b.ops = b.ops[:0]
	b.lineWriter.start = 0
	b.cur = restoreOp{}
	return &b.lineWriter
}

// done returns the rendered spec without the leading space and newline.
func (b *specBuilder) done() string {
	s := b.buf
	if len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[0] == ' ' {
		s = s[1:]
	}
	return string(s)
}
