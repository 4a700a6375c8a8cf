package xtblob

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/lines"
)

// typeLines types input's lines as a writer would (the iptables engine's
// renderer: a declaration, an -A and its chain; everything else
// LineOther).
func typeLines(input []byte) []Line {
	var out []Line
	sc := lines.New(input)
	for sc.Scan() {
		l := sc.Line()
		t := Line{End: uint32(sc.End())}
		switch {
		case len(l) > 1 && l[0] == ':':
			name, _, _ := bytes.Cut(l[1:], []byte{' '})
			t.Kind, t.Name = LineDeclare, uint8(min(len(name), 255))
		case len(l) > 3 && string(l[:3]) == "-A ":
			name, _, _ := bytes.Cut(l[3:], []byte{' '})
			t.Kind, t.Name = LineAppend, uint8(min(len(name), 255))
		}
		out = append(out, t)
	}
	return out
}

// scramble gives each Line a random kind and name length, keeping the
// ends: what a writer that types wrongly hands over.
func scramble(ls []Line, r *rand.Rand) []Line {
	out := slices.Clone(ls)
	for i := range out {
		out[i].Kind = LineKind(r.IntN(4))
		out[i].Name = uint8(r.IntN(256))
	}
	return out
}

// samePlan fails t unless input typed as ls parses to the plan parseInput
// makes of it.
func samePlan(t *testing.T, what string, fam Family, input []byte, ls []Line) {
	t.Helper()
	want := parseInput(fam, input)
	got := parseLines(fam, input, slices.Values(ls))
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got.ops), len(want.ops)) {
			if got.ops[i] != want.ops[i] {
				t.Fatalf("%s: op %d: typed %+v, parsed %+v", what, i, got.ops[i], want.ops[i])
			}
		}
		t.Fatalf("%s: the plan from typed lines is not the parsed one (%d ops, %d parsed; %d rules, %d parsed)", what, len(got.ops), len(want.ops), len(got.encs), len(want.encs))
	}
}

func typedCorpus(t testing.TB) map[string]string {
	in := map[string]string{}
	for i, p := range payloads {
		in[strings.Repeat("p", i+1)+"4"] = fill(p, "10.0.0.7", "172.30.0.10")
		in[strings.Repeat("p", i+1)+"6"] = fill(p, "2001:db8::7", "fd00::10")
	}
	files, err := filepath.Glob("../../iptables/testdata/*.golden")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden payloads of the iptables engine: %v", err)
	}
	for _, g := range files {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		in[filepath.Base(g)] = string(b)
	}
	// chain names of 253 to 255 bytes: a name's length is a byte
	long := strings.Repeat("C", 253)
	in["long"] = "*filter\n:" + long + " - [0:0]\n:" + long + "D - [0:0]\n:" + long + "DE - [0:0]\n:" + long + "DEF - [0:0]\n" +
		"-A " + long + " -j ACCEPT\n-A " + long + "D -j ACCEPT\n-A " + long + "DE -j ACCEPT\n-A " + long + "DE\n-A " + long + "DEF -j DROP\nCOMMIT\n"
	// lines the typed path must leave to the text parser
	in["odd"] = "*filter\n:  KUBE-A - [0:0]\n:KUBE-B\t- [0:0]\n-A  KUBE-A -j ACCEPT\n-A KUBE-A\t-j DROP\n-A !X -j DROP\n-A -j DROP\n" +
		"-A \"Q\" -j DROP\n-A KUBE-B\n-A KUBE-B \n:\n-A\nCOMMIT\n-A KUBE-A -j ACCEPT\n*nat\n:X - [0:0]\n-A X -j RETURN"
	return in
}

// TestParseLinesSamePlan: an input typed by its writer (RestoreOptions.Lines)
// makes the plan parsing its text makes, byte for byte; so does one typed
// wrongly (the typed path reads only what the text confirms), and one
// whose ends do not split it into its lines (parsed as text).
func TestParseLinesSamePlan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, s := range typedCorpus(t) {
		fam := IPv4
		if strings.HasPrefix(name, "ipv6") || strings.HasSuffix(name, "6") {
			fam = IPv6
		}
		input := []byte(s)
		ls := typeLines(input)
		samePlan(t, name+" typed", fam, input, ls)
		for i := range 5 {
			samePlan(t, name+" typed wrongly "+string(rune('0'+i)), fam, input, scramble(ls, r))
		}
		if len(ls) > 2 {
			samePlan(t, name+" short", fam, input, ls[:len(ls)-1])
			cut := slices.Clone(ls)
			cut[1].End--
			samePlan(t, name+" ends inside a line", fam, input, cut)
			merged := slices.Delete(slices.Clone(ls), 1, 2)
			samePlan(t, name+" two lines as one", fam, input, merged)
		}
	}
}

// FuzzParseLines: whatever the input and however its lines are typed, the
// plan is the text's.
func FuzzParseLines(f *testing.F) {
	for _, s := range typedCorpus(f) {
		f.Add(s, uint64(0), false)
		f.Add(s, uint64(7), true)
	}
	f.Fuzz(func(t *testing.T, input string, seed uint64, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		ls := typeLines([]byte(input))
		if seed != 0 {
			ls = scramble(ls, rand.New(rand.NewPCG(seed, seed)))
		}
		samePlan(t, "fuzzed", fam, []byte(input), ls)
	})
}
