package iptables_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// A full sync over chains the kernel already has (with other content)
// declares each of them right before the rules of its service (the chain exists, so the
// declaration only flushes it), and only new chains in the sorted block
// after "*nat"; the resulting tables are the same as from a first sync.
func TestFullSyncDeclaresExistingChainsWithTheirService(t *testing.T) {
	load := func(p *Proxier) {
		p.OnServiceAdd(svc("ns", "a", "172.30.0.1", nodePort(30001)))
		p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}, ep{ip: "10.0.0.2"}))
	}
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	load(p)
	mustSync(t, p)
	existing := map[string]bool{}
	chains, err := fake.Chains(xtables.TableNAT)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		existing[string(c)] = true
		// Full syncs skip the chains the kernel holds as planned: empty
		// a's service chains so that they differ and get rewritten.
		// (KUBE-POSTROUTING too, so that its rules separate the block
		// from the first service.)
		if strings.HasPrefix(string(c), "KUBE-SVC-") || strings.HasPrefix(string(c), "KUBE-EXT-") || c == "KUBE-POSTROUTING" {
			if err := fake.FlushChain(context.Background(), xtables.TableNAT, c); err != nil {
				t.Fatal(err)
			}
		}
	}

	addB := func(p *Proxier) {
		p.OnServiceAdd(svc("ns", "b", "172.30.0.2"))
		p.OnEndpointSliceAdd(slice("ns", "b", "", ep{ip: "10.0.1.1"}))
	}
	addB(p)
	var payload []byte
	fake.SetRestoreHook(func(data []byte) error {
		payload = bytes.Clone(data)
		return nil
	})
	p.RequestFullSync()
	mustSync(t, p)
	fake.SetRestoreHook(nil)

	nat, _, _ := strings.Cut(string(payload), "\nCOMMIT\n")
	lines := strings.Split(nat, "\n")[1:] // after "*nat"
	block := 0
	for block < len(lines) && strings.HasPrefix(lines[block], ":") {
		block++
	}
	declaredAt := map[string]int{}
	var newInBlock, lazy int
	for i, l := range lines {
		if !strings.HasPrefix(l, ":") {
			continue
		}
		c, _, _ := strings.Cut(l[1:], " ")
		declaredAt[c] = i
		if !isServiceChainName(c) {
			continue
		}
		switch {
		case existing[c] && i < block:
			t.Errorf("existing chain %s declared in the block ahead of the rules", c)
		case !existing[c] && i >= block:
			t.Errorf("new chain %s declared after the block: %q", c, l)
		case existing[c]:
			lazy++
		default:
			newInBlock++
		}
	}
	if lazy == 0 || newInBlock == 0 {
		t.Fatalf("test setup: %d existing chains declared with their service, %d new ones in the block; want both\n%s", lazy, newInBlock, nat)
	}
	// Every use of a chain (its rules, or a jump to it) comes after its
	// declaration.
	for i, l := range lines {
		f := strings.Fields(l)
		for j, w := range f {
			if (j == 1 && (f[0] == "-A" || f[0] == "-I")) || (j > 0 && f[j-1] == "-j") {
				if at, ok := declaredAt[w]; ok && at > i {
					t.Errorf("line %d uses %s, declared only at line %d: %q", i, w, at, l)
				}
			}
		}
	}

	want := fullDumpOf(t, ipv4Config, func(q *Proxier) { load(q); addB(q) })
	if got := normalizedDump(fake.Dump()); got != want {
		t.Errorf("tables differ from a first sync of the same state:\n%s", lineDiff(want, got))
	}
}

func isServiceChainName(c string) bool {
	for _, p := range []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"} {
		if strings.HasPrefix(c, p) {
			return true
		}
	}
	return false
}
