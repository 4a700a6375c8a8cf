//go:build linux

package nftables_test

import (
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// countingLister counts the listings of a full sync (each starts with
// TableExists) and forwards everything to the real netlink lister.
type countingLister struct {
	real  nftables.ChainCommentLister
	lists atomic.Int32
}

func (c *countingLister) TableExists(ctx context.Context) (bool, error) {
	c.lists.Add(1)
	return c.real.TableExists(ctx)
}

func (c *countingLister) ChainHeads(ctx context.Context, chains []string) (map[string]nftables.ChainHead, error) {
	return c.real.ChainHeads(ctx, chains)
}

func (c *countingLister) ListElements(ctx context.Context, name string, start func(int), fn func(nftables.ListedElement) error) error {
	return c.real.ListElements(ctx, name, start, fn)
}

func (c *countingLister) RuleComments(ctx context.Context, chains []string) (map[string][]*string, error) {
	return c.real.RuleComments(ctx, chains)
}

func (c *countingLister) ListChainNames(ctx context.Context) ([]string, error) {
	return c.real.ListChainNames(ctx)
}

// TestKernelResyncOfUnchangedTable: on a real kernel, the periodic resync
// of a table nothing changed since our transactions lists nothing and
// writes nothing; a foreign table added, a rule of ours deleted by hand,
// or an element of ours deleted by hand make the next resync list, and
// repair what is ours.
func TestKernelResyncOfUnchangedTable(t *testing.T) {
	inFreshNetns(t, func() {
		ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
		if err != nil {
			t.Skipf("nftables unavailable: %v", err)
		}
		cl := &countingLister{real: ifs.Comments}
		ifs.Comments = cl
		clk := clocktesting.NewFakeClock(time.Now())
		cfg := testConfig()
		cfg.Clock = clk
		p, err := nftables.NewProxier(cfg, ifs)
		if err != nil {
			t.Fatal(err)
		}
		c := makeCluster(100, 3)
		c.feed(p)
		mustSync(t, p)
		if cl.lists.Load() == 0 {
			t.Fatal("the first sync did not list")
		}
		want := nft(t, "list table ip kube-proxy")
		periodic := func(what string, wantList bool) engine.SyncOutcome {
			t.Helper()
			cl.lists.Store(0)
			clk.Step(2 * time.Hour)
			out := mustSync(t, p)
			if !out.Full || out.Reason != engine.ReasonPeriodic {
				t.Fatalf("%s: want the periodic full resync, got %+v", what, out)
			}
			if listed := cl.lists.Load() > 0; listed != wantList {
				t.Errorf("%s: listed=%v, want %v", what, listed, wantList)
			}
			return out
		}
		if out := periodic("unchanged table", false); out.Result.Writes != 0 {
			t.Errorf("unchanged table: %d writes", out.Result.Writes)
		}
		// A partial sync of ours keeps custody.
		p.OnEndpointSliceUpdate(c.slices[3], makeSlice(3, 3, 1))
		if out := mustSync(t, p); out.Full || out.Result.Writes == 0 {
			t.Fatalf("partial sync: %+v", out)
		}
		p.OnEndpointSliceUpdate(makeSlice(3, 3, 1), c.slices[3])
		mustSync(t, p)
		periodic("after partial syncs", false)

		// A foreign table: listed, nothing of ours to repair.
		nft(t, "add table ip foreign; add chain ip foreign c")
		if out := periodic("foreign table added", true); out.Result.Writes != 0 {
			t.Errorf("foreign table: %d writes", out.Result.Writes)
		}
		periodic("after the listing", false)

		// A rule of ours deleted by hand, the first of the services chain
		// (which carries the chain's content hash) and then a later one of
		// a service chain (the listing counts each chain's rules): the
		// periodic resync lists every chain and repairs each.
		deleteRule := func(chain string, i int) {
			t.Helper()
			rules, err := ifs.NFTables.ListRules(context.Background(), chain)
			if err != nil || len(rules) <= i {
				t.Fatalf("chain %s: %v %v", chain, rules, err)
			}
			tx := ifs.NFTables.NewTransaction()
			tx.Delete(&knftables.Rule{Chain: chain, Handle: rules[i].Handle})
			if err := ifs.NFTables.Run(context.Background(), tx); err != nil {
				t.Fatal(err)
			}
		}
		deleteRule("services", 0)
		if out := periodic("first rule of ours deleted", true); out.Result.Writes == 0 {
			t.Error("first rule deleted: nothing written")
		}
		if got := nft(t, "list table ip kube-proxy"); stripStale(got) != stripStale(want) {
			t.Errorf("first rule deleted: not repaired:\n got: %s\nwant: %s", got, want)
		}
		// A per-service chain of two rules or more (a service chain
		// dispatching through an endpoint map holds one: an external
		// chain, or a chain of per-endpoint rules); its second goes.
		var svcChain string
		for _, l := range strings.Split(want, "\n") {
			f := strings.Fields(l)
			if len(f) < 2 || f[0] != "chain" || strings.Contains(f[1], "-check") ||
				!(strings.HasPrefix(f[1], "service-") || strings.HasPrefix(f[1], "external-")) {
				continue
			}
			if rules, err := ifs.NFTables.ListRules(context.Background(), f[1]); err == nil && len(rules) >= 2 {
				svcChain = f[1]
				break
			}
		}
		if svcChain == "" {
			t.Fatal("no per-service chain of two rules")
		}
		deleteRule(svcChain, 1)
		if out := periodic("later rule of ours deleted", true); out.Result.Writes == 0 {
			t.Error("later rule deleted: nothing written")
		}
		if got := nft(t, "list table ip kube-proxy"); stripStale(got) != stripStale(want) {
			t.Errorf("later rule deleted: not repaired:\n got: %s\nwant: %s", got, want)
		}

		// An element of ours deleted by hand: listed and repaired.
		periodic("after the repair", false)
		nft(t, "delete element ip kube-proxy service-ips { 10.96.0.5 . tcp . 80 }")
		if out := periodic("element deleted", true); out.Result.Writes == 0 {
			t.Error("element deleted: not repaired")
		}
		if got := nft(t, "list table ip kube-proxy"); stripStale(got) != stripStale(want) {
			t.Errorf("element not repaired:\n got: %s\nwant: %s", got, want)
		}

		// An endpoint map's element deleted, another's value replaced, by
		// hand: listed and repaired (the resync trusts its record of
		// those elements only while nothing else committed).
		rule := regexp.MustCompile(`numgen random mod (\d+) offset (\d+) map @(service-endpoints-tcp-\d\d)`).FindAllStringSubmatch(want, 2)
		if len(rule) < 2 {
			t.Fatalf("no two endpoint-map rules in\n%s", want)
		}
		periodic("after the element repair", false)
		nft(t, "delete element ip kube-proxy "+rule[0][3]+" { "+rule[0][2]+" }")
		nft(t, "delete element ip kube-proxy "+rule[1][3]+" { "+rule[1][2]+" }")
		nft(t, "add element ip kube-proxy "+rule[1][3]+" { "+rule[1][2]+" : 10.200.0.1 . 9 }")
		if out := periodic("endpoint elements tampered with", true); out.Result.Writes == 0 {
			t.Error("endpoint elements tampered with: not repaired")
		}
		if got := nft(t, "list table ip kube-proxy"); stripStale(got) != stripStale(want) {
			t.Errorf("endpoint elements not repaired:\n got: %s\nwant: %s", got, want)
		}
		if err := p.Cleanup(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
