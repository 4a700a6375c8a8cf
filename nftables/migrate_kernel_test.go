//go:build linux

package nftables_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// checkedNFT runs check after every transaction that reached the kernel,
// through nft (Run) or over netlink (the writer that netlink returns).
type checkedNFT struct {
	knftables.Interface
	check  func(n int)
	runs   int // transactions of either kind
	nlRuns int // of them, netlink batches
}

func (c *checkedNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	err := c.Interface.Run(ctx, tx)
	if err == nil {
		c.runs++
		c.check(c.runs)
	}
	return err
}

// netlink wraps w so that its batches are checked as c's transactions.
func (c *checkedNFT) netlink(w nftables.NetlinkWriter) nftables.NetlinkWriter {
	return checkedWriter{w: w, c: c}
}

type checkedWriter struct {
	w nftables.NetlinkWriter
	c *checkedNFT
}

func (cw checkedWriter) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	err := cw.w.WriteBatch(ctx, msgs)
	if err == nil {
		cw.c.runs++
		cw.c.nlRuns++
		cw.c.check(cw.c.runs)
	}
	return err
}

// TestKernelAdoptUpstreamTable moves a node from upstream kube-proxy's
// nftables mode to this engine with real nft: the table upstream v1.34.4
// writes for the golden objects (testdata/upstream/ipv4.nft), and the
// older layout upstream used before v1.31 and this engine before it
// followed v1.34 (testdata/older-layout.nft), are loaded, then the engine
// starts over them in transactions of at most 20 operations. After every
// transaction every service keeps a complete path (tableGaps); in the end
// the table is the one the engine writes on an empty node, a restart
// writes nothing, and Cleanup removes the table.
func TestKernelAdoptUpstreamTable(t *testing.T) {
	for _, file := range []string{"testdata/upstream/ipv4.nft", "testdata/older-layout.nft"} {
		t.Run(file, func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			svcs, slices := goldenObjects(topo)
			cfg := upstreamVariants[0].config(topo)
			start := func(nft *checkedNFT, maxOps int) *nftables.Proxier {
				ifs, err := nftables.NewInterfaces(v1.IPv4Protocol)
				if err != nil {
					t.Skipf("nftables unavailable: %v", err)
				}
				if nft != nil {
					ifs.NFTables = nft
					ifs.Netlink = nft.netlink(ifs.Netlink)
				}
				c := cfg
				c.MaxTransactionOps = maxOps
				p, err := nftables.NewProxier(c, ifs)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range svcs {
					p.OnServiceAdd(s)
				}
				for _, s := range slices {
					p.OnEndpointSliceAdd(s)
				}
				p.OnServiceSynced()
				p.OnEndpointSlicesSynced()
				return p
			}

			var fresh string
			inFreshNetns(t, func() {
				mustSync(t, start(nil, 0))
				fresh = nft(t, "list table ip kube-proxy")
			})

			inFreshNetns(t, func() {
				nft(t, "-f", file)
				if gaps := tableGaps(t); len(gaps) > 0 {
					t.Fatalf("the loaded table itself has gaps: %v", gaps)
				}
				real, err := knftables.New(knftables.IPv4Family, nftables.TableName, knftables.UseNetlink)
				if err != nil {
					t.Skipf("nftables unavailable: %v", err)
				}
				checked := &checkedNFT{Interface: real}
				checked.check = func(n int) {
					if gaps := tableGaps(t); len(gaps) > 0 {
						t.Errorf("after transaction %d: %v", n, gaps)
					}
				}
				p := start(checked, 20)
				if out := mustSync(t, p); out.Result.Writes == 0 {
					t.Fatal("adoption wrote nothing")
				}
				checked.check = func(int) {}
				if checked.runs < 2 {
					t.Errorf("adoption ran %d transactions; the test wants several", checked.runs)
				}
				if checked.nlRuns == 0 || checked.nlRuns == checked.runs {
					t.Errorf("adoption ran %d transactions, %d of them over netlink; the test wants both kinds", checked.runs, checked.nlRuns)
				}
				got := nft(t, "list table ip kube-proxy")
				for _, obsolete := range []string{"chain filter-prerouting {", "chain filter-output-post-dnat {"} {
					if strings.Contains(got, obsolete) {
						t.Errorf("adopted table kept %q", obsolete)
					}
				}
				if stripStale(got) != stripStale(fresh) {
					t.Errorf("adopted table differs from a fresh one:\n got: %s\nwant: %s", got, fresh)
				}
				if out := mustSync(t, start(nil, 0)); out.Result.Writes != 0 {
					t.Errorf("restart after adoption wrote %d operations", out.Result.Writes)
				}
				// tableGaps sees a gap when there is one.
				nft(t, "flush chain ip kube-proxy endpoint-F3YY5MPG-conformance/web/tcp/http__10.244.1.2/8080")
				if gaps := tableGaps(t); len(gaps) != 1 {
					t.Errorf("a hand-flushed endpoint chain: gaps %v, want one", gaps)
				}
				if err := p.Cleanup(context.Background()); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput(); err == nil {
					t.Errorf("Cleanup left the table:\n%s", out)
				}
			})
		})
	}
}

// tableGaps lists what would break traffic in the kube-proxy table now: a
// jump, goto or verdict-map value naming a chain that does not exist or
// has no rules (every chain the table dispatches to must end somewhere),
// and an endpoint chain without its dnat rule.
func tableGaps(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("nft", "-j", "list", "table", "ip", nftables.TableName).Output()
	if err != nil {
		t.Fatalf("nft -j list table: %v", err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	chains := map[string]int{}  // chain → rules
	dnat := map[string]bool{}   // chain → has a dnat rule
	refs := map[string]string{} // target → one referrer
	for _, obj := range doc.Nftables {
		if raw, ok := obj["chain"]; ok {
			var c struct{ Name string }
			_ = json.Unmarshal(raw, &c)
			chains[c.Name] += 0
		}
	}
	for _, obj := range doc.Nftables {
		for kind, raw := range obj {
			var v any
			_ = json.Unmarshal(raw, &v)
			var from string
			switch kind {
			case "rule":
				var r struct{ Chain string }
				_ = json.Unmarshal(raw, &r)
				chains[r.Chain]++
				from = "rule in " + r.Chain
				if strings.Contains(string(raw), `"dnat"`) {
					dnat[r.Chain] = true
				}
			case "map":
				var m struct{ Name string }
				_ = json.Unmarshal(raw, &m)
				from = "map " + m.Name
			default:
				continue
			}
			walkTargets(v, func(target string) { refs[target] = from })
		}
	}
	var gaps []string
	for target, from := range refs {
		n, ok := chains[target]
		switch {
		case !ok:
			gaps = append(gaps, fmt.Sprintf("%s names missing chain %s", from, target))
		case n == 0:
			gaps = append(gaps, fmt.Sprintf("%s names empty chain %s", from, target))
		case strings.HasPrefix(target, "endpoint-") && !dnat[target]:
			gaps = append(gaps, fmt.Sprintf("%s names endpoint chain %s without dnat", from, target))
		}
	}
	sort.Strings(gaps)
	return gaps
}

// walkTargets calls f with the target of every {"jump"|"goto": {"target": …}}.
func walkTargets(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, sub := range x {
			if k == "jump" || k == "goto" {
				if m, ok := sub.(map[string]any); ok {
					if tg, ok := m["target"].(string); ok {
						f(tg)
						continue
					}
				}
			}
			walkTargets(sub, f)
		}
	case []any:
		for _, sub := range x {
			walkTargets(sub, f)
		}
	}
}
