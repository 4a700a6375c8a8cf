//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// inFreshNetns runs f on this goroutine's OS thread inside a new network
// namespace, destroyed afterwards. It skips unless root with nft.
func inFreshNetns(tb testing.TB, f func()) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for a network namespace and nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		tb.Skip("no nft binary")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New() // also switches this thread into it
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(fmt.Sprintf("cannot return to the original netns: %v", err))
		}
		ns.Close()
	}()
	f()
}

func nft(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command("nft", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func realProxier(tb testing.TB) *nftables.Proxier {
	tb.Helper()
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		tb.Skipf("nftables unavailable: %v", err)
	}
	p, err := nftables.NewProxier(testConfig(), ifs)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// TestKernelRestartFlushForeign: on a real kernel, a restart over our
// table writes nothing, a hand flush is found and repaired, and a foreign
// table is never touched (not even by Cleanup).
func TestKernelRestartFlushForeign(t *testing.T) {
	inFreshNetns(t, func() {
		ctx := context.Background()
		nft(t, "add table ip foreign")
		nft(t, "add chain ip foreign c { type filter hook input priority 0 ; }")
		nft(t, "add rule ip foreign c tcp dport 9 drop")
		foreign := nft(t, "list table ip foreign")

		c := makeCluster(200, 5)
		c.services = append(c.services, makeService(200)) // no endpoints: reject
		p := realProxier(t)
		c.feed(p)
		mustSync(t, p)
		want := nft(t, "list table ip kube-proxy")

		// Restart over a correct table: nothing written.
		q := realProxier(t)
		c.feed(q)
		if out := mustSync(t, q); out.Result.Writes != 0 {
			t.Errorf("restart wrote %d operations", out.Result.Writes)
		}
		// Partial sync after an endpoint change.
		q.OnEndpointSliceUpdate(c.slices[3], makeSlice(3, 5, 1))
		if out := mustSync(t, q); out.Full || out.Result.Writes == 0 || out.Result.Writes > 12 {
			t.Errorf("endpoint change: full=%v writes=%d", out.Full, out.Result.Writes)
		}
		q.OnEndpointSliceUpdate(makeSlice(3, 5, 1), c.slices[3])
		mustSync(t, q)

		// Hand flush: drift, repaired by a full sync.
		nft(t, "flush table ip kube-proxy")
		drifted, err := nftables.NftablesDriftedForTest(q)
		if err != nil || !drifted {
			t.Fatalf("drift after a flush = %v, %v", drifted, err)
		}
		q.RequestFullSync()
		mustSync(t, q)
		if got := nft(t, "list table ip kube-proxy"); stripStale(got) != stripStale(want) {
			t.Errorf("not repaired:\n got: %s\nwant: %s", got, want)
		}
		if drifted, err := nftables.NftablesDriftedForTest(q); err != nil || drifted {
			t.Errorf("drift after repair = %v, %v", drifted, err)
		}
		// The table deleted by hand: drift too (the netlink read finds
		// no chain, where nft reported the table not found).
		nft(t, "delete table ip kube-proxy")
		if drifted, err := nftables.NftablesDriftedForTest(q); err != nil || !drifted {
			t.Fatalf("drift after the table was deleted = %v, %v", drifted, err)
		}
		q.RequestFullSync()
		mustSync(t, q)

		if err := q.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("nft", "list", "table", "ip", "kube-proxy").CombinedOutput(); err == nil {
			t.Errorf("Cleanup left the table:\n%s", out)
		}
		if got := nft(t, "list table ip foreign"); got != foreign {
			t.Errorf("foreign table changed:\n%s", got)
		}
	})
}

// stripStale drops empty chains (flushed, deleted a second later) and
// blank lines from an "nft list table" output, and sorts the chain blocks:
// a repair deletes and re-adds base chains (their priority may have to
// change), which moves them to the end of the listing.
func stripStale(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "chain ") && i+1 < len(lines) && strings.TrimSpace(lines[i+1]) == "}" {
			i++
			continue
		}
		if l == "" {
			continue
		}
		out = append(out, lines[i])
	}
	// Split into blocks at each chain, set or map (the table header stays
	// first) and sort them. A chain's own comment line is dropped: nft
	// sets it only when it creates the chain (an adopted chain keeps none).
	var head []string
	var blocks []string
	cur := -1
	inChain := false
	for _, l := range out {
		tl := strings.TrimSpace(l)
		if strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, "\t\t") &&
			(strings.HasPrefix(tl, "chain ") || strings.HasPrefix(tl, "set ") || strings.HasPrefix(tl, "map ")) {
			blocks = append(blocks, "")
			cur = len(blocks) - 1
			inChain = strings.HasPrefix(tl, "chain ")
		}
		if cur < 0 {
			head = append(head, l)
			continue
		}
		if l == "}" {
			continue // the table's closing brace
		}
		if inChain && strings.HasPrefix(l, "\t\tcomment ") {
			continue
		}
		blocks[cur] += l + "\n"
	}
	sort.Strings(blocks)
	return strings.Join(head, "\n") + "\n" + strings.Join(blocks, "")
}
