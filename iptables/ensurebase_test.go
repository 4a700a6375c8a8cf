package iptables_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// noListing makes every listing fail, so ensureBase checks and creates
// the base chains, jump rules and canaries one command at a time.
type noListing struct{ xtables.Runner }

func (noListing) SaveInto(context.Context, xtables.Table, *bytes.Buffer) error {
	return errors.New("no listing")
}

// baseState is a node where some of our base chains and jump rules exist
// and a foreign rule sits in a built-in chain we hook into.
func baseState(t *testing.T, r xtables.Runner) {
	t.Helper()
	ctx := context.Background()
	for _, tc := range []xtables.TableChain{{Table: xtables.TableNAT, Chain: xtables.ChainKubeServices}, {Table: xtables.TableFilter, Chain: xtables.ChainKubeProxyCanary}} {
		if _, err := r.EnsureChain(ctx, tc.Table, tc.Chain); err != nil {
			t.Fatal(err)
		}
	}
	for _, rule := range []struct {
		table xtables.Table
		chain xtables.Chain
		args  []string
	}{
		{xtables.TableNAT, xtables.ChainPrerouting, []string{"-s", "192.0.2.1/32", "-j", "RETURN"}},
		{xtables.TableNAT, xtables.ChainOutput, []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{xtables.TableFilter, xtables.ChainForward, []string{"-s", "192.0.2.1/32", "-j", "ACCEPT"}},
	} {
		if _, err := r.EnsureRule(ctx, xtables.Append, rule.table, rule.chain, rule.args...); err != nil {
			t.Fatal(err)
		}
	}
}

// On a node without our chains, or with some of them, the first sync
// creates the missing base chains, jump rules and canaries in one restore
// and no single command, and leaves the tables exactly as the commands
// did (which it still runs when a listing fails).
func TestEnsureBaseInOneRestore(t *testing.T) {
	for _, g := range goldenStates {
		if g.family != v1.IPv4Protocol {
			continue
		}
		for _, before := range []string{"empty", "partial"} {
			t.Run(g.name+"/"+before, func(t *testing.T) {
				sync := func(wrap func(xtables.Runner) xtables.Runner) (*iptablestest.Fake, int) {
					fake := iptablestest.NewFake(v1.IPv4Protocol)
					if before == "partial" {
						baseState(t, fake)
					}
					fake.ResetCalls()
					base := 0
					fake.SetRestoreHook(func(data []byte) error {
						if isBaseRestore(data) {
							base++
						}
						return nil
					})
					var ipt xtables.Runner = fake
					if wrap != nil {
						ipt = wrap(fake)
					}
					p, err := NewProxier(withNode(g.cfg), Interfaces{IPTables: ipt, Sysctl: iptablestest.NewSysctl(nil)})
					if err != nil {
						t.Fatal(err)
					}
					p.OnServiceSynced()
					p.OnEndpointSlicesSynced()
					g.state.load(p)
					mustSync(t, p)
					return fake, base
				}
				cmdFake, cmdBase := sync(func(r xtables.Runner) xtables.Runner { return noListing{r} })
				if cmdBase != 0 || cmdFake.CallsOf("EnsureChain") == 0 {
					t.Fatalf("without listings: %d base restores, %d EnsureChain; want the commands", cmdBase, cmdFake.CallsOf("EnsureChain"))
				}
				fake, base := sync(nil)
				if base != 1 || fake.CallsOf("EnsureChain")+fake.CallsOf("EnsureRule") != 0 {
					t.Errorf("with listings: %d base restores, %d EnsureChain, %d EnsureRule; want one restore, no command",
						base, fake.CallsOf("EnsureChain"), fake.CallsOf("EnsureRule"))
				}
				if want, got := cmdFake.Dump(), fake.Dump(); got != want {
					t.Errorf("tables differ from the commands':\n%s", lineDiff(want, got))
				}
			})
		}
	}
}

// A base restore that fails for another reason than the lock (a chain
// that appeared since the listing, say) falls back to the commands; one
// that fails on the lock fails the sync (the commands would each wait).
func TestEnsureBaseRestoreFailure(t *testing.T) {
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	fake.FailOn("Restore", 1, errors.New("chain exists"))
	mustSync(t, p)
	if fake.CallsOf("EnsureChain") == 0 {
		t.Error("no command after the base restore failed")
	}
	want := fake.Dump()
	q, qfake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	lockErr := &xtables.RestoreError{Err: &xtables.LockError{Tool: "iptables-restore"}}
	qfake.FailOn("Restore", 1, lockErr)
	if err := q.Sync(context.Background()); !errors.Is(err, xtables.ErrLockHeld) {
		t.Fatalf("Sync = %v, want the lock error", err)
	}
	if n := qfake.CallsOf("EnsureChain") + qfake.CallsOf("EnsureRule"); n != 0 {
		t.Errorf("%d commands after a lock error", n)
	}
	mustSync(t, q)
	if got := qfake.Dump(); got != want {
		t.Errorf("after the retry:\n%s", lineDiff(want, got))
	}
}
