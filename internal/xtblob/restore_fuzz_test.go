package xtblob

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// emptyTable is a table with its built-in chains only (all five hooks).
func emptyTable(fam Family, name string) *table {
	t := &table{fam: fam, lay: &entryLayouts[fam], name: name, srcs: [][]byte{nil}, byName: map[string]int32{}, lastLookup: -1}
	for h := 0; h < numHooks; h++ {
		ci := t.addChain(hookNames[h], int8(h))
		t.chains[ci].verdict = verdictAccept
		t.info.validHooks |= 1 << h
	}
	return t
}

// blobOf lays t out as Restore writes it, returning the blob and the
// info the kernel would report for it.
func blobOf(t *table) ([]byte, info) {
	order := t.chainOrder()
	size, n := t.layoutChains(order)
	blob := make([]byte, size)
	t.marshalChains(order, blob)
	t.marshalTail(blob, len(blob)-t.lay.headSize())
	inf := info{validHooks: t.info.validHooks, numEntries: n, size: uint32(size)}
	inf.hookEntry, inf.underflow = t.hooks()
	return blob, inf
}

// FuzzRestorePlan applies arbitrary input to empty tables without a
// kernel: nothing panics, and a table it accepts lays out into a blob
// that reads back (parseTable: every jump lands on a chain, every chain
// ends in its verdict) into the same blob again.
func FuzzRestorePlan(f *testing.F) {
	for _, p := range payloads {
		f.Add(fill(p, "10.0.0.7", "172.30.0.10"), false)
		f.Add(fill(p, "2001:db8::7", "fd00::10"), true)
	}
	files, _ := filepath.Glob("../../iptables/testdata/*.golden")
	for _, g := range files {
		if b, err := os.ReadFile(g); err == nil {
			f.Add(string(b), filepath.Base(g)[:4] == "ipv6")
		}
	}
	f.Add("*filter\n:A - [0:0]\n:B - [0:0]\n-A A -j B\n-I A 1 -g B\n-A B\n-R A 2 -j RETURN\n-D A 1\n-X B\nCOMMIT\n", false)
	f.Fuzz(func(t *testing.T, input string, v6 bool) {
		fam := IPv4
		if v6 {
			fam = IPv6
		}
		p := parseInput(fam, []byte(input))
		p.encode(1, nil)
		defer p.free()
		tables := map[string]*table{}
		err := p.apply(tables, func(name string) (*table, error) { return emptyTable(fam, name), nil }, "")
		if err != nil {
			return
		}
		for name, tb := range tables {
			blob, inf := blobOf(tb)
			again, err := parseTable(fam, name, inf, blob)
			if err != nil {
				t.Fatalf("table %s as written does not read back: %v", name, err)
			}
			blob2, _ := blobOf(again)
			if !bytes.Equal(blob, blob2) {
				t.Fatalf("table %s: read back and written again, the blob differs", name)
			}
		}
	})
}

// payloads is a sequence of restore inputs (%[1]s, %[2]s: addresses of
// the family).
var payloads = []string{
	// built-in chains without a policy: nothing to commit (policy
	// counters stay)
	`*filter
:INPUT - [0:0]
:FORWARD - [0:0]
COMMIT
`,
	// a full payload
	`*filter
:INPUT ACCEPT [0:0]
:KUBE-A - [0:0]
:KUBE-B - [0:0]
:KUBE-C - [0:0]
-A INPUT -m comment --comment "kube" -j KUBE-A
-A INPUT -i lo -m comment --comment "not -o here" -j ACCEPT
-A KUBE-C -i eth0 -o eth1 -j ACCEPT
-A KUBE-A -s %[1]s -j KUBE-B
-A KUBE-A -g KUBE-C
-A KUBE-B -j MARK --set-xmark 0x4000/0x4000
-A KUBE-B -d %[2]s -j ACCEPT
-A KUBE-B
-A KUBE-C -j KUBE-B
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-1 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A KUBE-SERVICES -d %[2]s -j KUBE-SVC-1
-A KUBE-SVC-1 -j MARK --set-xmark 0x4000/0x4000
COMMIT
`,
	// a second full payload: redeclares, deletes, adds
	`# comment
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-1 - [0:0]
:KUBE-SVC-0 - [0:0]
-A KUBE-SERVICES -d %[2]s -j KUBE-SVC-0
-A KUBE-SVC-0 -j RETURN
-X KUBE-SVC-1
COMMIT
*filter
:KUBE-A - [0:0]
:KUBE-B - [0:0]
:KUBE-C - [0:0]
:KUBE-D - [0:0]
-A KUBE-A -j KUBE-D
-A KUBE-D -j KUBE-B
-X KUBE-C
COMMIT
`,
	// partial: the setup commands' shapes
	`*filter
-N KUBE-E
-I INPUT -j KUBE-E
-I INPUT 2 -s %[1]s -j DROP
-A KUBE-E -j RETURN
-I KUBE-E 1 -j ACCEPT
-R KUBE-E 2 -d %[1]s -j DROP
-D INPUT -s %[1]s -j DROP
-D FOREIGN 1
-P OUTPUT DROP
:FORWARD ACCEPT [0:0]
COMMIT
*nat
-F KUBE-SERVICES
-F KUBE-SVC-0
-X KUBE-SVC-0
-D OUTPUT -j ZZZ-FOREIGN
-F ZZZ-FOREIGN
-X ZZZ-FOREIGN
COMMIT
`,
	// empty sections change nothing
	`*filter
COMMIT
*nat
# nothing
COMMIT
`,
	// rules that encode to many times their text: the encoder's arena
	// outgrows its reservation
	"*filter\n:KUBE-MANY - [0:0]\n" + strings.Repeat("-A KUBE-MANY -m comment --comment x\n", 3000) + "COMMIT\n",
}

func fill(p, a1, a2 string) string {
	return strings.NewReplacer("%[1]s", a1, "%[2]s", a2).Replace(p)
}
