package lines_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/lines"
)

type scanned struct {
	line       string
	start, end int
	terminated bool
}

func scanAll(data []byte) []scanned {
	var out []scanned
	sc := lines.New(data)
	for sc.Scan() {
		out = append(out, scanned{string(sc.Line()), sc.Start(), sc.End(), sc.Terminated()})
		if got, want := string(sc.Rest()), string(data[sc.End():]); got != want {
			panic(fmt.Sprintf("Rest %q, want %q", got, want))
		}
	}
	return out
}

func TestScanner(t *testing.T) {
	for _, tc := range []struct {
		data string
		want []scanned
	}{
		{"", nil},
		{"\n", []scanned{{"", 0, 1, true}}},
		{"\n\n", []scanned{{"", 0, 1, true}, {"", 1, 2, true}}},
		{"a", []scanned{{"a", 0, 1, false}}},
		{"a\n", []scanned{{"a", 0, 2, true}}},
		{"a\nbc", []scanned{{"a", 0, 2, true}, {"bc", 2, 4, false}}},
		{"*nat\n\n-A X\r\nCOMMIT\n", []scanned{
			{"*nat", 0, 5, true}, {"", 5, 6, true}, {"-A X\r", 6, 12, true}, {"COMMIT", 12, 19, true},
		}},
	} {
		if got := scanAll([]byte(tc.data)); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %+v, want %+v", tc.data, got, tc.want)
		}
	}
}

func TestScannerLinesAliasData(t *testing.T) {
	data := []byte("ab\ncd\n")
	sc := lines.New(data)
	for sc.Scan() {
		if l := sc.Line(); &l[0] != &data[sc.Start()] {
			t.Errorf("line %q is a copy", l)
		}
	}
}

func TestScannerDoesNotAllocate(t *testing.T) {
	data := []byte("*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j KUBE-NODEPORTS\nCOMMIT\n")
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		sc := lines.New(data)
		for sc.Scan() {
			n += len(sc.Line())
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per scan, want 0", allocs)
	}
}

func TestZeroScanner(t *testing.T) {
	var sc lines.Scanner
	if sc.Scan() || len(sc.Line()) != 0 {
		t.Errorf("the zero Scanner yielded a line")
	}
}

func benchData() []byte {
	var data []byte
	for i := range 10000 {
		data = fmt.Appendf(data, "-A KUBE-SVC-%016d -m comment --comment \"ns/svc-%d:p\" -j KUBE-SEP-%016d\n", i, i, i)
	}
	return data
}

var sink int

// BenchmarkScan and BenchmarkHandLoop walk the same 10,000 lines: the
// Scanner must cost no more than the loop it replaces.
func BenchmarkScan(b *testing.B) {
	data := benchData()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		sc := lines.New(data)
		for sc.Scan() {
			n += len(sc.Line())
		}
		sink = n
	}
}

func BenchmarkHandLoop(b *testing.B) {
	data := benchData()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		for rest := data; len(rest) > 0; {
			line := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				line, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			n += len(line)
		}
		sink = n
	}
}

func ExampleScanner() {
	data := []byte("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n")
	sc := lines.New(data)
	for sc.Scan() {
		fmt.Printf("%q at %d\n", sc.Line(), sc.Start())
	}
	// Output:
	// "*nat" at 0
	// ":KUBE-SERVICES - [0:0]" at 5
	// "COMMIT" at 28
}
