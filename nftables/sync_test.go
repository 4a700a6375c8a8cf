//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/engine"
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

// The periodic full resync lists names and elements only (the recorded
// content hashes are trusted for chains that still exist): no rule
// listing, nothing written for an unchanged table.
func TestPeriodicResyncTrustsRecord(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	clk := clocktesting.NewFakeClock(time.Now())
	cfg := testConfig()
	cfg.Clock = clk
	p := newTestProxier(t, fakes, cfg)
	makeCluster(20, 2).feed(p)
	mustSync(t, p)
	want := fakes.Dump()

	fakes.NFTables.ResetCalls()
	clk.Step(2 * time.Hour)
	out := mustSync(t, p)
	if !out.Full || out.Reason != engine.ReasonPeriodic || out.Result.Writes != 0 {
		t.Errorf("resync: full=%v reason=%s writes=%d", out.Full, out.Reason, out.Result.Writes)
	}
	if n := fakes.NFTables.CallsOf("ListRules"); n != 0 {
		t.Errorf("periodic resync listed rules %d times", n)
	}

	// Flush a service chain by hand: the periodic resync trusts the
	// record of what the chain holds (it still exists); a requested full
	// sync reads every chain's hash and repairs it.
	ctx := context.Background()
	var victim string
	for name := range fakes.NFTables.Table.Chains {
		if strings.HasPrefix(name, "service-") && strings.Contains(name, "/") {
			victim = name
			break
		}
	}
	tx := fakes.NFTables.NewTransaction()
	tx.Flush(&knftables.Chain{Name: victim})
	if err := fakes.NFTables.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	p.RequestFullSync()
	mustSync(t, p)
	if got := fakes.Dump(); got != want {
		t.Errorf("not repaired by a requested full sync:\n%s", got)
	}
}

// Two services with the same node port (bad input the API server should
// have refused): the first keeps it, the sync does not fail, and the
// second's other addresses work.
func TestConflictingNodePorts(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(3, 1)
	c.services[1].Spec.Type = v1.ServiceTypeNodePort
	c.services[1].Spec.Ports[0].NodePort = c.services[0].Spec.Ports[0].NodePort
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)
	if !strings.Contains(fakes.Dump(), "10.96.0.1 . tcp . 80 : goto service-") {
		t.Errorf("second service's cluster IP missing:\n%s", fakes.Dump())
	}
	// Restart: same outcome, nothing written.
	q := newTestProxier(t, fakes, testConfig())
	c.feed(q)
	if out := mustSync(t, q); out.Result.Writes != 0 {
		t.Errorf("restart wrote %d", out.Result.Writes)
	}
}
