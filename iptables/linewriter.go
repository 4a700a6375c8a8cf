package iptables

import (
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"strconv"
	"strings"
)

// lineWriter appends iptables-restore lines to a reused byte slice without
// formatting through fmt (a full sync at 10,000 services writes ~400,000
// lines, so every allocation per line shows).
type lineWriter struct {
	buf   []byte
	lines int
}

func (w *lineWriter) reset() {
	w.buf = w.buf[:0]
	w.lines = 0
}

// rule starts "-A chain".
func (w *lineWriter) rule(chain xtables.Chain) *lineWriter {
	w.buf = append(w.buf, "-A "...)
	w.buf = append(w.buf, chain...)
	return w
}

// op starts "<op> chain", op being -A, -I or -D.
func (w *lineWriter) op(op string, chain xtables.Chain) *lineWriter {
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
	w.buf = append(w.buf, target...)
	w.end()
}

func (w *lineWriter) end() {
	w.buf = append(w.buf, '\n')
	w.lines++
}

// raw appends a whole line (without its newline).
func (w *lineWriter) raw(line string) {
	w.buf = append(w.buf, line...)
	w.end()
}

// chainLine appends ":chain - [0:0]", which creates the chain, or flushes
// it when it exists (iptables-restore --noflush).
func (w *lineWriter) chainLine(chain xtables.Chain) {
	w.buf = append(w.buf, ':')
	w.buf = append(w.buf, chain...)
	w.buf = append(w.buf, " - [0:0]"...)
	w.end()
}

// spec is a helper that renders one rule's match+target (no "-A chain")
// into a string, for the rules a service puts into the shared chains.
type specBuilder struct{ lineWriter }

func (b *specBuilder) start() *lineWriter {
	b.buf = b.buf[:0]
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
