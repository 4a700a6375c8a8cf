package iptables_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// A full sync over a ruleset that already matches the plan writes nothing:
// neither a restarted proxier (no memory of what it wrote) nor a forced
// resync of the one that wrote it. A chain changed by hand is the only one
// rewritten, and the tables end as a first sync leaves them.
func TestFullSyncWritesOnlyChainsThatDiffer(t *testing.T) {
	for _, g := range goldenStates {
		t.Run(g.name, func(t *testing.T) {
			p, fake := newTestProxier(t, g.cfg, g.family)
			g.state.load(p)
			mustSync(t, p)
			want := fake.Dump()

			var payloads [][]byte
			fake.SetRestoreHook(func(data []byte) error {
				payloads = append(payloads, bytes.Clone(data))
				return nil
			})
			p.RequestFullSync()
			mustSync(t, p)
			if len(payloads) != 0 {
				t.Fatalf("resync of an unchanged ruleset restored:\n%s", payloads[0])
			}

			// Restart: a new proxier over the same tables.
			q, err := NewProxier(withNode(g.cfg), Interfaces{IPTables: fake})
			if err != nil {
				t.Fatal(err)
			}
			q.OnServiceSynced()
			q.OnEndpointSlicesSynced()
			g.state.load(q)
			mustSync(t, q)
			if len(payloads) != 0 {
				t.Fatalf("restart over a correct ruleset restored:\n%s", payloads[0])
			}

			// One chain emptied by hand: only it is rewritten.
			chains, err := fake.Chains(xtables.TableNAT)
			if err != nil {
				t.Fatal(err)
			}
			var victim xtables.Chain
			for _, c := range chains {
				if strings.HasPrefix(string(c), "KUBE-SVC-") {
					victim = c
					break
				}
			}
			if victim == "" {
				t.Fatal("test setup: no KUBE-SVC chain")
			}
			if err := fake.FlushChain(context.Background(), xtables.TableNAT, victim); err != nil {
				t.Fatal(err)
			}
			q.RequestFullSync()
			mustSync(t, q)
			if len(payloads) != 1 {
				t.Fatalf("got %d restores after a hand change, want 1", len(payloads))
			}
			var declared []string
			for _, l := range strings.Split(string(payloads[0]), "\n") {
				if strings.HasPrefix(l, ":") {
					c, _, _ := strings.Cut(l[1:], " ")
					declared = append(declared, c)
				}
				if strings.HasPrefix(l, "-A ") && !strings.HasPrefix(l, "-A "+string(victim)+" ") {
					t.Errorf("rule of another chain rewritten: %s", l)
				}
			}
			if len(declared) != 1 || declared[0] != string(victim) {
				t.Errorf("declared %v, want only %s", declared, victim)
			}
			if got := fake.Dump(); got != want {
				t.Errorf("tables differ from the first sync's:\n%s", lineDiff(want, got))
			}
		})
	}
}

func withNode(cfg Config) Config {
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	return cfg
}
