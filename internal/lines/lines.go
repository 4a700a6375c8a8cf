// Package lines walks the lines of a byte slice in place: the one line
// scanner of the module, for restore inputs, save listings and object
// files alike.
//
// A Scanner neither copies nor allocates: each line it yields aliases the
// data it was given. Unlike bufio.Scanner it reads no io.Reader, has no
// line-length limit and keeps no buffer, and it can say where a line lies
// in the data (for callers that cut the data at line boundaries) and
// whether the line ended with a newline.
package lines

import "bytes"

// Scanner yields the lines of one byte slice, split at '\n', without the
// newline. The last line need not end with a newline; data ending in one
// yields no empty line after it, and empty data yields none at all. A
// '\r' before the newline is kept.
//
// The zero Scanner yields nothing; New makes one for data. A Scanner is a
// small value meant to live in a local variable:
//
//	sc := lines.New(data)
//	for sc.Scan() {
//		line := sc.Line()
//		...
//	}
//
// Declare it before the loop, not in the for statement: a variable of a
// for statement is a new one in every iteration (Go 1.22), and since Scan
// takes its address the compiler copies the Scanner on every line, which
// made the loop twice as slow (BenchmarkScan against BenchmarkHandLoop).
// Scan does no more per line than the hand-written loops it replaced (its
// state is the line and the rest; positions are computed when asked for):
// several of them are hot paths over hundreds of thousands of lines. A
// caller that needs line numbers counts its Scans.
type Scanner struct {
	data []byte // all of it
	line []byte // the current line, without its newline
	rest []byte // the data after the current line and its newline
}

// New returns a Scanner over data, before its first line.
func New(data []byte) Scanner {
	return Scanner{data: data, rest: data}
}

// Scan advances to the next line and reports whether there is one.
func (s *Scanner) Scan() bool {
	i := bytes.IndexByte(s.rest, '\n') + 1
	if i == 0 {
		s.line, s.rest = s.rest, nil
		return len(s.line) > 0
	}
	s.line, s.rest = s.rest[:i-1], s.rest[i:]
	return true
}

// Line is the current line without its newline. It aliases the data and
// is empty before the first Scan and after the last.
func (s *Scanner) Line() []byte { return s.line }

// End is the offset in the data just past the current line and its
// newline: where the next line starts.
func (s *Scanner) End() int { return len(s.data) - len(s.rest) }

// Terminated reports whether the current line ended with a newline (only
// the last line of data may not).
func (s *Scanner) Terminated() bool {
	end := s.End()
	return end > 0 && s.data[end-1] == '\n'
}

// Start is the offset in the data of the current line's first byte.
func (s *Scanner) Start() int {
	if s.Terminated() {
		return s.End() - len(s.line) - 1
	}
	return s.End() - len(s.line)
}

// Rest is the data after the current line and its newline: what Scan has
// not reached yet.
func (s *Scanner) Rest() []byte { return s.rest }
