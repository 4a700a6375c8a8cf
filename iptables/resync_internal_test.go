package iptables

import (
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
	known := map[xtables.Table]tableSums{
		xtables.TableNAT:    sumListing([]byte(before), xtables.TableNAT),
		xtables.TableFilter: {},
	}
	n0 := tableEntries(xtables.TableNAT, known[xtables.TableNAT])
	if !applyPayload(known, []byte(payload)) {
		t.Fatal("applyPayload refused the payload")
	}
	want := sumListing([]byte(after), xtables.TableNAT)
	got := known[xtables.TableNAT]
	if len(got) != len(want) {
		t.Fatalf("chains: got %d, want %d", len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		_, tailLast := unorderedChain(xtables.TableNAT, []byte(name))
		if g == nil || !g.same(*w, tailLast) {
			t.Errorf("chain %s: got %+v, want %+v", name, g, w)
		}
	}
	// Entries (as the legacy blob counts them): 2 built-ins (a policy
	// each) + 5 user chains (head and return each) + 6 rules + 1 = 19
	// before; 2 + 5*2 + 8 + 1 = 21 after.
	if n0 != 19 || tableEntries(xtables.TableNAT, got) != 21 {
		t.Errorf("entries before %d, after %d; want 19, 21", n0, tableEntries(xtables.TableNAT, got))
	}
	// Deleting the rule that must stay last (the node-port tail) is not
	// followed: the digest keeps only the last rule's hash.
	if applyPayload(known, []byte("*nat\n-D KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n")) {
		t.Error("applyPayload followed the tail rule's deletion")
	}
	// A line it cannot follow refuses the payload.
	if applyPayload(known, []byte("*nat\n-R KUBE-SVC-A 1 -j RETURN\nCOMMIT\n")) {
		t.Error("applyPayload accepted -R")
	}
	if applyPayload(known, []byte("*raw\n:X - [0:0]\nCOMMIT\n")) {
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
