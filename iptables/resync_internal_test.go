package iptables

import (
	"bytes"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// applyPayload carries the digests of a listing through a restore exactly
// as a new listing of the result digests it.
func TestApplyPayloadMatchesListing(t *testing.T) {
	before := `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A1 - [0:0]
:KUBE-SEP-OLD - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -d 10.96.0.9/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-A -j KUBE-SEP-A1
-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.1.0.1:80
COMMIT
`
	payload := `*nat
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A2 - [0:0]
:KUBE-SEP-OLD - [0:0]
-A KUBE-SVC-A -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A1
-A KUBE-SVC-A -j KUBE-SEP-A2
-A KUBE-SEP-A2 -p tcp -m tcp -j DNAT --to-destination 10.1.0.2:80
-I KUBE-SERVICES -d 10.96.0.2/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-D KUBE-SERVICES -d 10.96.0.9/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-X KUBE-SEP-OLD
COMMIT
`
	after := `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A1 - [0:0]
:KUBE-SEP-A2 - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.2/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-SVC-A -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-A1
-A KUBE-SVC-A -j KUBE-SEP-A2
-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.1.0.1:80
-A KUBE-SEP-A2 -p tcp -m tcp -j DNAT --to-destination 10.1.0.2:80
COMMIT
`
	d := newChainDiffer()
	known := map[xtables.Table]tableSums{
		xtables.TableNAT:    sumListing([]byte(before), xtables.TableNAT, &d),
		xtables.TableFilter: {},
	}
	n0 := tableEntries(xtables.TableNAT, known[xtables.TableNAT])
	if !applyText(known, []byte(payload), &d) {
		t.Fatal("applyPayload refused the payload")
	}
	want := sumListing([]byte(after), xtables.TableNAT, &d)
	got := known[xtables.TableNAT]
	if len(got) != len(want) {
		t.Fatalf("chains: got %d, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		_, tailLast := unorderedChain(xtables.TableNAT, []byte(name))
		if g != nil && g.lazy {
			// Declared and filled by the payload: the raw hash of its
			// lines stands for the normal form.
			if !g.rawOK || g.n != w.n || g.raw != rawOf(&d, payload, name) {
				t.Errorf("chain %s: got %+v, want the raw hash of its %d payload lines", name, g, w.n)
			}
			continue
		}
		if g == nil || !g.same(*w, tailLast) {
			t.Errorf("chain %s: got %+v, want %+v", name, g, w)
		}
	}
	if !got["KUBE-SVC-A"].lazy || got["KUBE-SERVICES"].lazy || got["KUBE-SERVICES"].rawOK {
		t.Errorf("want KUBE-SVC-A lazy and KUBE-SERVICES in normal form only: %+v, %+v", got["KUBE-SVC-A"], got["KUBE-SERVICES"])
	}
	// Entries (as the legacy blob counts them): 2 built-ins (a policy
	// each) + 5 user chains (head and return each) + 6 rules + 1 = 19
	// before; 2 + 5*2 + 8 + 1 = 21 after.
	if n0 != 19 || tableEntries(xtables.TableNAT, got) != 21 {
		t.Errorf("entries before %d, after %d; want 19, 21", n0, tableEntries(xtables.TableNAT, got))
	}
	// Deleting the rule that must stay last (the node-port tail) is not
	// followed: the digest keeps only the last rule's hash.
	if applyText(known, []byte("*nat\n-D KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n"), &d) {
		t.Error("applyPayload followed the tail rule's deletion")
	}
	// A line it cannot follow refuses the payload.
	if applyText(known, []byte("*nat\n-R KUBE-SVC-A 1 -j RETURN\nCOMMIT\n"), &d) {
		t.Error("applyPayload accepted -R")
	}
	if applyText(known, []byte("*raw\n:X - [0:0]\nCOMMIT\n"), &d) {
		t.Error("applyPayload accepted a table it does not carry")
	}
}

func TestSectionsWithCommands(t *testing.T) {
	for in, want := range map[string]int{
		"*nat\n:A - [0:0]\nCOMMIT\n*filter\n-A B -j RETURN\nCOMMIT\n": 2,
		"*nat\nCOMMIT\n*filter\n-A B -j RETURN\nCOMMIT\n":             1,
		"# comment\n*nat\nCOMMIT\n":                                   0,
	} {
		if got := xtables.SectionsWithCommands([]byte(in)); got != want {
			t.Errorf("%q: %d, want %d", in, got, want)
		}
	}
}

// rawOf is the raw hash of chain's "-A" lines in payload.
func rawOf(d *chainDiffer, payload, chain string) uint64 {
	h := uint64(rawStart)
	for _, l := range strings.Split(payload, "\n") {
		if strings.HasPrefix(l, "-A "+chain+" ") {
			h = rawStep(h, d.lineHash([]byte(l)))
		}
	}
	return h
}

// reducePayload memoises the raw hash of a chain it found the same as a
// listed one by normal form, so the next compare needs no parsing, and a
// change is still seen after that.
func TestReducePayloadMemoisesRawHashes(t *testing.T) {
	listing := `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A1 - [0:0]
-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SVC-A -j KUBE-SEP-A1
-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.1.0.1:80
COMMIT
`
	// As we render it: other spellings, same rules.
	payload := `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-A1 - [0:0]
-A KUBE-SERVICES -m tcp -p tcp -d 10.96.0.1 --dport 80 -j KUBE-SVC-A
-A KUBE-SVC-A -j KUBE-SEP-A1
-A KUBE-SEP-A1 -m tcp -p tcp -j DNAT --to-destination 10.1.0.1:80
COMMIT
*filter
COMMIT
`
	d := newChainDiffer()
	kernel := map[xtables.Table]tableSums{
		xtables.TableNAT:    sumListing([]byte(listing), xtables.TableNAT, &d),
		xtables.TableFilter: {},
	}
	for round := range 2 {
		out, written, skipped := reduceText(t, []byte(payload), kernel, &d, nil)
		if out != nil || written != 0 || skipped != 3 {
			t.Fatalf("round %d: written %d, skipped %d, out %q; want all skipped, nothing out", round, written, skipped, out)
		}
		for _, c := range []string{"KUBE-SERVICES", "KUBE-SVC-A", "KUBE-SEP-A1"} {
			if s := kernel[xtables.TableNAT][c]; !s.rawOK || s.lazy {
				t.Errorf("round %d: %s not memoised: %+v", round, c, s)
			}
		}
	}
	changed := strings.Replace(payload, "10.1.0.1:80", "10.1.0.2:80", 1)
	out, written, skipped := reduceText(t, []byte(changed), kernel, &d, nil)
	want := "*nat\n:KUBE-SEP-A1 - [0:0]\n-A KUBE-SEP-A1 -m tcp -p tcp -j DNAT --to-destination 10.1.0.2:80\nCOMMIT\n"
	if string(out) != want || written != 1 || skipped != 2 {
		t.Errorf("changed endpoint: written %d, skipped %d, out\n%s\nwant\n%s", written, skipped, out, want)
	}

	// A chain our restore wrote is compared by raw hash only: the same
	// lines are skipped, other lines (even of the same rules) rewritten.
	if !applyText(kernel, []byte(changed), &d) {
		t.Fatal("applyPayload refused the payload")
	}
	if s := kernel[xtables.TableNAT]["KUBE-SEP-A1"]; !s.lazy || !s.rawOK {
		t.Fatalf("KUBE-SEP-A1 after our restore: %+v, want lazy with a raw hash", s)
	}
	if out, written, skipped := reduceText(t, []byte(changed), kernel, &d, nil); out != nil || written != 0 || skipped != 3 {
		t.Errorf("same lines again: written %d, skipped %d, out %q", written, skipped, out)
	}
	respelled := strings.Replace(changed, "-A KUBE-SEP-A1 -m tcp -p tcp", "-A KUBE-SEP-A1 -p tcp -m tcp", 1)
	if _, written, skipped := reduceText(t, []byte(respelled), kernel, &d, nil); written != 1 || skipped != 2 {
		t.Errorf("respelled lines of a chain we wrote: written %d, skipped %d; want it rewritten", written, skipped)
	}
}

// The render's declaration hints spare reducePayload its lookups and
// change nothing in its result; a hint that names another chain's digest
// is not followed.
func TestReducePayloadHints(t *testing.T) {
	listing := "*nat\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-A1 - [0:0]\n:KUBE-SEP-A2 - [0:0]\n" +
		"-A KUBE-SVC-A -j KUBE-SEP-A1\n-A KUBE-SEP-A1 -j DNAT --to-destination 10.1.0.1:80\n-A KUBE-SEP-A2 -j DNAT --to-destination 10.1.0.2:80\nCOMMIT\n"
	payload := "*nat\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-A1 - [0:0]\n:KUBE-SEP-A2 - [0:0]\n" +
		"-A KUBE-SVC-A -j KUBE-SEP-A1\n-A KUBE-SEP-A1 -j DNAT --to-destination 10.1.0.1:80\n-A KUBE-SEP-A2 -j DNAT --to-destination 10.1.0.9:80\nCOMMIT\n"
	for _, wrong := range []bool{false, true} {
		d := newChainDiffer()
		kernel := map[xtables.Table]tableSums{xtables.TableNAT: sumListing([]byte(listing), xtables.TableNAT, &d)}
		want, ww, ws := reduceText(t, []byte(payload), kernel, &d, nil)
		want = bytes.Clone(want)
		kernel = map[xtables.Table]tableSums{xtables.TableNAT: sumListing([]byte(listing), xtables.TableNAT, &d)}
		var hints []declHint
		for _, c := range []string{"KUBE-SVC-A", "KUBE-SEP-A1", "KUBE-SEP-A2"} {
			sum := kernel[xtables.TableNAT][c]
			if wrong && c == "KUBE-SEP-A2" {
				sum = kernel[xtables.TableNAT]["KUBE-SEP-A1"]
			}
			hints = append(hints, declHint{off: uint32(strings.Index(payload, ":"+c+" ")), sum: sum})
		}
		got, gw, gs := reduceText(t, []byte(payload), kernel, &d, hints)
		if string(got) != string(want) || gw != ww || gs != ws || gw != 1 {
			t.Errorf("wrong hint %v: got written %d skipped %d\n%s\nwant written %d skipped %d\n%s", wrong, gw, gs, got, ww, ws, want)
		}
	}
}

// reduceText is reducePayload over a payload written as text; the ops of
// what it returns must be those of its text.
func reduceText(t *testing.T, text []byte, kernel map[xtables.Table]tableSums, d *chainDiffer, hints []declHint) ([]byte, int, int) {
	t.Helper()
	out, written, skipped := reducePayload(typePayload(text), kernel, d, hints)
	if m := opsMismatch(out); m != "" {
		t.Errorf("reducePayload's ops: %s", m)
	}
	return out.text, written, skipped
}

// applyText is applyPayload over a payload written as text.
func applyText(known map[xtables.Table]tableSums, text []byte, d *chainDiffer) bool {
	return applyPayload(known, typePayload(text), d)
}
