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
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
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

// TestKernelAdoptUpstreamTable moves a node to this engine with real nft
// from each table another proxy (or an older version of this one) leaves
// for the golden objects: upstream v1.37.2's (testdata/upstream/ipv4.nft),
// upstream v1.34.4's (testdata/upstream-1.34/ipv4.nft, endpoint chains for
// every service), this engine's own before it followed v1.37
// (testdata/svcproxy-1.34-layout.nft: v1.34's shape with content hashes),
// and the older layout upstream used before v1.31
// (testdata/older-layout.nft). Each is loaded, then the engine starts over
// it in transactions of at most 20 operations. After every transaction
// every jump, goto and verdict-map target exists and ends somewhere, and
// every service still DNATs (tableGaps); in the end the table is the one
// the engine writes on an empty node, a restart writes nothing, and
// Cleanup removes the table.
func TestKernelAdoptUpstreamTable(t *testing.T) {
	for _, file := range []string{"testdata/upstream/ipv4.nft", "testdata/upstream-1.34/ipv4.nft",
		"testdata/svcproxy-1.34-layout.nft", "testdata/older-layout.nft"} {
		t.Run(file, func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			svcs, slices := goldenObjects(topo)
			cfg := upstreamVariants[0].config(topo)
			start := func(nft *checkedNFT, maxOps int) *nftables.Proxier {
				ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
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
				served := serviceKeys(t)
				if len(served) < 5 {
					t.Fatalf("the loaded table serves only %v", served)
				}
				checked := &checkedNFT{Interface: real}
				checked.check = func(n int) {
					if gaps := tableGaps(t); len(gaps) > 0 {
						t.Errorf("after transaction %d: %v", n, gaps)
					}
					now := serviceKeys(t)
					for k := range served {
						if !now[k] {
							t.Errorf("after transaction %d: %s no longer served", n, k)
						}
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
				nft(t, "flush chain ip kube-proxy endpoint-PVALKI53-conformance/sticky/tcp/http__10.244.1.2/8080")
				if gaps := tableGaps(t); len(gaps) != 1 {
					t.Errorf("a hand-flushed endpoint chain: gaps %v, want one", gaps)
				}
				nft(t, "flush chain ip kube-proxy service-LPBTB7PB-conformance/web/tcp/http")
				if gaps := tableGaps(t); len(gaps) != 3 || !strings.Contains(strings.Join(gaps, "\n"), "reaches no dnat") {
					t.Errorf("and a hand-flushed service chain: gaps %v, want three (empty, and no dnat reached)", gaps)
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
	chains := map[string]int{}      // chain → rules
	dnat := map[string]bool{}       // chain → has a dnat rule
	refs := map[string]string{}     // target → one referrer
	next := map[string][]string{}   // chain → the chains its rules go to
	dispatch := map[string]string{} // chain a service map dispatches to → the map
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
			walkTargets(v, func(target string) {
				refs[target] = from
				switch {
				case kind == "rule":
					var r struct{ Chain string }
					_ = json.Unmarshal(raw, &r)
					next[r.Chain] = append(next[r.Chain], target)
				case from == "map service-ips" || from == "map service-nodeports":
					dispatch[target] = from
				}
			})
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
	// Every chain a service map dispatches to reaches a dnat rule.
	var reaches func(c string, seen map[string]bool) bool
	reaches = func(c string, seen map[string]bool) bool {
		if dnat[c] {
			return true
		}
		if seen[c] {
			return false
		}
		seen[c] = true
		for _, n := range next[c] {
			if reaches(n, seen) {
				return true
			}
		}
		return false
	}
	for target, from := range dispatch {
		if _, ok := chains[target]; ok && !reaches(target, map[string]bool{}) {
			gaps = append(gaps, fmt.Sprintf("%s dispatches to %s, which reaches no dnat", from, target))
		}
	}
	sort.Strings(gaps)
	return gaps
}

// serviceKeys lists the keys of the service-ips and service-nodeports
// maps (the services the table serves).
func serviceKeys(t *testing.T) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	for _, m := range []string{"service-ips", "service-nodeports"} {
		out, err := exec.Command("nft", "list", "map", "ip", nftables.TableName, m).Output()
		if err != nil {
			t.Fatalf("nft list map %s: %v", m, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			for _, el := range strings.Split(l, ",") {
				if k, _, ok := strings.Cut(el, " : "); ok {
					k = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(k), "elements = {"))
					keys[m+" "+k] = true
				}
			}
		}
	}
	return keys
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
