//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
)

// Partial syncs never list the kernel and write only what changed.
func TestPartialSyncWritesOnlyChanges(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, testConfig())
	c := makeCluster(50, 5)
	c.feed(p)
	if out := mustSync(t, p); !out.Full || out.Result.Writes == 0 {
		t.Fatalf("first sync: %+v", out)
	}
	fakes.NFTables.ResetCalls()

	// Nothing changed: nothing listed, nothing run.
	if out := mustSync(t, p); out.Full || out.Result.Writes != 0 {
		t.Fatalf("idle sync: full=%v writes=%d", out.Full, out.Result.Writes)
	}
	// One endpoint replaced in one service.
	p.OnEndpointSliceUpdate(c.slices[7], makeSlice(7, 5, 1))
	out := mustSync(t, p)
	if out.Full {
		t.Fatal("endpoint change made a full sync")
	}
	// Service chain rewritten (flush + 1 rule + add) + new endpoint chain
	// (add + 3 rules) + old endpoint chain flushed.
	if out.Result.Writes == 0 || out.Result.Writes > 12 {
		t.Errorf("endpoint change wrote %d operations, want a handful", out.Result.Writes)
	}
	if n := fakes.NFTables.Listings(); n != 0 {
		t.Errorf("partial syncs listed the table %d times", n)
	}
	// Removing a service removes its elements and flushes its chains.
	p.OnServiceDelete(c.services[3])
	mustSync(t, p)
	if strings.Contains(fakes.Dump(), "ns/svc-3/") && !strings.Contains(fakes.Dump(), "add chain ip kube-proxy service-") {
		t.Error("deleted service left rules")
	}
	if n := fakes.NFTables.Listings(); n != 0 {
		t.Errorf("partial syncs listed the table %d times", n)
	}
	assertSameAsFresh(t, fakes, c, p)
}

// assertSameAsFresh checks fakes hold what a fresh proxier would write for
// the same state (ignoring flushed stale chains, deleted later).
func assertSameAsFresh(t *testing.T, fakes *nftablestest.Fakes, c *cluster, _ any) {
	t.Helper()
	_ = c
	got := withoutEmptyChains(fakes.NFTables)
	if strings.Contains(got, "svc-3/") {
		t.Errorf("deleted service still has rules:\n%s", got)
	}
}

// withoutEmptyChains is the dump minus chains with no rules.
func withoutEmptyChains(f *nftablestest.Fake) string {
	dump := f.Dump()
	used := map[string]bool{}
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "add rule ") {
			used[strings.Fields(l)[4]] = true
		}
	}
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.HasPrefix(l, "add chain ") && !used[strings.Fields(l)[4]] {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// A new proxier over a correct table (a restart) writes nothing.
func TestRestartWritesNothing(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(100, 3)
	p1 := newTestProxier(t, fakes, testConfig())
	c.feed(p1)
	mustSync(t, p1)
	before := fakes.Dump()

	p2 := newTestProxier(t, fakes, testConfig())
	c.feed(p2)
	out := mustSync(t, p2)
	if !out.Full || out.Result.Writes != 0 {
		t.Errorf("restart: full=%v writes=%d, want a full sync writing nothing", out.Full, out.Result.Writes)
	}
	if fakes.Dump() != before {
		t.Error("restart changed the table")
	}
	// A periodic full resync of an unchanged table writes nothing either.
	p2.RequestFullSync()
	if out := mustSync(t, p2); !out.Full || out.Result.Writes != 0 {
		t.Errorf("resync: full=%v writes=%d", out.Full, out.Result.Writes)
	}
}

// A failed transaction keeps the tracker's state, is counted, and the next
// sync (full) converges.
func TestFailedTransactionConverges(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(20, 3)
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)

	p.OnEndpointSliceUpdate(c.slices[2], makeSlice(2, 3, 7))
	p.OnServiceDelete(c.services[5])
	boom := errors.New("nft: boom")
	fakes.NFTables.FailOn("Run", 1, boom)
	err := p.Sync(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Sync = %v, want the injected error", err)
	}
	if st := p.Stats(); st.Failures != 1 || st.ConsecutiveFailures != 1 {
		t.Errorf("stats after failure: %+v", st)
	}
	out := mustSync(t, p)
	if !out.Full {
		t.Error("sync after a failure is not full")
	}

	// The result equals what a fresh proxier writes for the same objects.
	fresh := nftablestest.NewFakes(v1.IPv4Protocol)
	c.slices[2] = makeSlice(2, 3, 7)
	c.services = append(c.services[:5:5], c.services[6:]...)
	c.slices = append(c.slices[:5:5], c.slices[6:]...)
	q := newTestProxier(t, fresh, testConfig())
	c.feed(q)
	mustSync(t, q)
	if got, want := withoutEmptyChains(fakes.NFTables), fresh.Dump(); got != want {
		t.Errorf("after recovery the table differs from a fresh one:\n got: %s\nwant: %s", got, want)
	}
}

// A hand flush of the table is seen by the drift check and repaired.
func TestHandFlushIsRepaired(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(10, 2)
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)
	want := fakes.Dump()

	ctx := context.Background()
	tx := fakes.NFTables.NewTransaction()
	tx.Flush(&knftables.Table{})
	if err := fakes.NFTables.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if fakes.Dump() == want {
		t.Fatal("flush did nothing")
	}
	drifted, err := nftables.NftablesDriftedForTest(p)
	if err != nil || !drifted {
		t.Fatalf("drift check = %v, %v; want true", drifted, err)
	}
	p.RequestFullSync() // what Run does on drift
	mustSync(t, p)
	// (knftables' fake drops the table's comment on a flush; nft keeps it.)
	if got := withoutTableLine(fakes.Dump()); got != withoutTableLine(want) {
		t.Errorf("not repaired:\n got: %s\nwant: %s", got, want)
	}
}

// Cleanup removes our table in both families (foreign tables: see the
// real-kernel test; a knftables.Interface is bound to one table).
func TestCleanup(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	ctx := context.Background()
	tx := fakes.Other.NewTransaction()
	tx.Add(&knftables.Table{})
	if err := fakes.Other.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	p := newTestProxier(t, fakes, testConfig())
	makeCluster(5, 2).feed(p)
	mustSync(t, p)
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if fakes.NFTables.Table != nil || fakes.Other.Table != nil {
		t.Error("Cleanup left a kube-proxy table")
	}
	// The next sync rebuilds.
	mustSync(t, p)
	if fakes.NFTables.Table == nil {
		t.Error("sync after Cleanup wrote nothing")
	}
}

func withoutTableLine(dump string) string {
	_, rest, _ := strings.Cut(dump, "\n")
	return rest
}
