//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// countingNFT counts the listings asked of nft (each parses its JSON),
// forwarding everything.
type countingNFT struct {
	knftables.Interface
	lists map[string]int
}

func (c *countingNFT) ListAll(ctx context.Context) (map[string][]string, error) {
	c.lists["ListAll"]++
	return c.Interface.ListAll(ctx)
}

func (c *countingNFT) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	c.lists["ListRules"]++
	return c.Interface.ListRules(ctx, chain)
}

func (c *countingNFT) ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error) {
	c.lists["ListElements"]++
	return c.Interface.ListElements(ctx, objectType, name)
}

// TestKernelForwardingInterfacesSameEngine: the plainest wrappers an
// embedder writes around the engine's drivers (each embeds the interface
// and overrides nothing) give the same engine: everything the engine reads
// of the table goes through methods of ChainCommentLister, GenerationReader
// and knftables.Interface, and every netlink batch through NetlinkWriter's
// (its ctx handed on: the encoder's buffers still go out without a copy),
// so a wrapper forwards it by construction. The
// same syncs (full or partial, reason, writes) on a real kernel, the same
// listings asked of nft, and the same table, with and without the
// wrappers.
func TestKernelForwardingInterfacesSameEngine(t *testing.T) {
	run := func(wrap bool) (outs []string, table string, lists map[string]int) {
		lists = map[string]int{}
		inFreshNetns(t, func() {
			ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
			if err != nil {
				t.Skipf("nftables unavailable: %v", err)
			}
			ifs.NFTables = &countingNFT{Interface: ifs.NFTables, lists: lists}
			if wrap {
				ifs.NFTables = struct{ knftables.Interface }{ifs.NFTables}
				ifs.Comments = struct{ nftables.ChainCommentLister }{ifs.Comments}
				ifs.Generation = struct{ nftables.GenerationReader }{ifs.Generation}
				ifs.Netlink = struct{ nftables.NetlinkWriter }{ifs.Netlink}
			}
			clk := clocktesting.NewFakeClock(time.Now())
			cfg := testConfig()
			cfg.Clock = clk
			p, err := nftables.NewProxier(cfg, ifs)
			if err != nil {
				t.Fatal(err)
			}
			c := makeCluster(50, 3)
			c.feed(p)
			sync := func() {
				out := mustSync(t, p)
				outs = append(outs, fmt.Sprintf("full=%v reason=%q writes=%d", out.Full, out.Reason, out.Result.Writes))
			}
			sync() // cold start
			clk.Step(2 * time.Hour)
			sync() // periodic, unchanged: not listed
			p.OnEndpointSliceUpdate(c.slices[3], makeSlice(3, 3, 1))
			sync() // partial
			nft(t, "add table ip foreign")
			clk.Step(2 * time.Hour)
			sync() // periodic after a foreign commit: listed
			p.RequestFullSync()
			sync()
			table = stripStale(nft(t, "list table ip kube-proxy"))
		})
		return outs, table, lists
	}
	plainOuts, plainTable, plainLists := run(false)
	wrapOuts, wrapTable, wrapLists := run(true)
	if fmt.Sprint(plainLists) != fmt.Sprint(wrapLists) {
		t.Errorf("nft listings differ with forwarding wrappers: plain %v, wrapped %v", plainLists, wrapLists)
	}
	// NFTables is a counting wrapper in both runs: with Comments set, the
	// self-check and the drift check read chains through it, not through
	// one nft listing per chain (as they did, before RuleComments, once
	// NFTables was no longer the Interface NewInterfaces made).
	if n := plainLists["ListRules"] + wrapLists["ListRules"]; n != 0 {
		t.Errorf("%d chains listed through nft with Interfaces.Comments set", n)
	}
	if fmt.Sprint(plainOuts) != fmt.Sprint(wrapOuts) {
		t.Errorf("syncs differ with forwarding wrappers:\nplain:   %q\nwrapped: %q", plainOuts, wrapOuts)
	}
	if plainTable != wrapTable {
		t.Errorf("tables differ with forwarding wrappers:\nplain:\n%s\nwrapped:\n%s", plainTable, wrapTable)
	}
	t.Logf("syncs: %q; nft listings: %v", plainOuts, plainLists)
}
