//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"sort"
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

// resyncFixture is a proxier of 20 services that wrote its table, with a
// fake clock to trigger the periodic full resync.
type resyncFixture struct {
	fakes *nftablestest.Fakes
	clk   *clocktesting.FakeClock
	p     *nftables.Proxier
	c     *cluster
	want  string
}

func newResyncFixture(t *testing.T, ifs func(*nftablestest.Fakes) nftables.Interfaces) *resyncFixture {
	t.Helper()
	f := &resyncFixture{fakes: nftablestest.NewFakes(v1.IPv4Protocol), clk: clocktesting.NewFakeClock(time.Now())}
	cfg := testConfig()
	cfg.Clock = f.clk
	i := f.fakes.Interfaces()
	if ifs != nil {
		i = ifs(f.fakes)
	}
	p, err := nftables.NewProxier(cfg, i)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.c = makeCluster(20, 2)
	f.c.feed(p)
	mustSync(t, p)
	f.want = f.fakes.Dump()
	return f
}

// periodic runs the periodic full resync and returns it and the number of
// listings it made.
func (f *resyncFixture) periodic(t *testing.T) (engine.SyncOutcome, int) {
	t.Helper()
	f.fakes.NFTables.ResetCalls()
	f.clk.Step(2 * time.Hour)
	out := mustSync(t, f.p)
	if !out.Full || out.Reason != engine.ReasonPeriodic {
		t.Fatalf("want the periodic full resync, got %+v", out)
	}
	return out, f.fakes.NFTables.Listings()
}

// flushEndpointChain empties one service chain (where the endpoints are)
// behind the engine's back.
func (f *resyncFixture) flushEndpointChain(t *testing.T, nft knftables.Interface) {
	t.Helper()
	var victim string
	for name := range f.fakes.NFTables.Table.Chains {
		if strings.HasPrefix(name, "service-") && strings.Contains(name, "/") {
			victim = name
			break
		}
	}
	tx := nft.NewTransaction()
	tx.Flush(&knftables.Chain{Name: victim})
	if err := nft.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
}

// A full resync of a table nothing touched since our last transaction
// lists nothing and writes nothing, periodic or requested; so does one
// after partial syncs of ours.
func TestResyncOfUnchangedTableListsNothing(t *testing.T) {
	f := newResyncFixture(t, nil)
	if out, n := f.periodic(t); n != 0 || out.Result.Writes != 0 {
		t.Errorf("periodic resync: %d listings, %d writes; want none", n, out.Result.Writes)
	}
	f.fakes.NFTables.ResetCalls()
	f.p.RequestFullSync()
	if out := mustSync(t, f.p); !out.Full || f.fakes.NFTables.Listings() != 0 || out.Result.Writes != 0 {
		t.Errorf("requested resync: full=%v, %d listings, %d writes", out.Full, f.fakes.NFTables.Listings(), out.Result.Writes)
	}
	// Our own partial syncs keep custody.
	for i := 0; i < 3; i++ {
		f.p.OnEndpointSliceUpdate(f.c.slices[i], makeSlice(i, 2, 9))
		if out := mustSync(t, f.p); out.Full || out.Result.Writes == 0 {
			t.Fatalf("partial sync: %+v", out)
		}
	}
	// The first resync after them deletes the endpoint chains they left
	// flushed (deferred deletes), without listing.
	out, n := f.periodic(t)
	if n != 0 {
		t.Errorf("periodic resync after partial syncs: %d listings, want none", n)
	}
	if out.Result.Writes > 0 {
		for _, line := range strings.Split(strings.TrimSpace(f.fakes.NFTables.LastTransaction.String()), "\n") {
			if !strings.HasPrefix(line, "delete chain ip kube-proxy endpoint-") {
				t.Errorf("resync after partial syncs wrote %q", line)
			}
		}
	}
	want := f.fakes.Dump()
	if out, n := f.periodic(t); n != 0 || out.Result.Writes != 0 {
		t.Errorf("second periodic resync: %d listings, %d writes; want none", n, out.Result.Writes)
	}
	if f.fakes.Dump() != want {
		t.Error("the resync changed the table")
	}
}

// A foreign change (a chain of ours flushed, a table of the other family
// added) moves the generation: the next periodic resync lists and repairs.
// With the skip made unconditional this test fails (the flushed chain
// stays flushed: the engine's record says it is full).
func TestResyncAfterForeignChangeLists(t *testing.T) {
	f := newResyncFixture(t, nil)
	f.flushEndpointChain(t, f.fakes.NFTables)
	// The periodic resync trusts recorded chain hashes but lists names
	// and elements; a requested one reads every chain.
	f.p.RequestFullSync()
	f.fakes.NFTables.ResetCalls()
	if out := mustSync(t, f.p); f.fakes.NFTables.Listings() == 0 || out.Result.Writes == 0 {
		t.Errorf("resync after a foreign flush: %d listings, %d writes; want a listing and a repair", f.fakes.NFTables.Listings(), out.Result.Writes)
	}
	if got := f.fakes.Dump(); got != f.want {
		t.Errorf("not repaired:\n%s", got)
	}
	// Custody again: the next resync lists nothing.
	if _, n := f.periodic(t); n != 0 {
		t.Errorf("resync after the repair: %d listings, want none", n)
	}
	// The other family's table (same network namespace, same generation).
	tx := f.fakes.Other.NewTransaction()
	tx.Add(&knftables.Table{})
	if err := f.fakes.Other.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if _, n := f.periodic(t); n == 0 {
		t.Error("resync after a commit in the other family listed nothing")
	}
	if _, n := f.periodic(t); n != 0 {
		t.Errorf("second resync: %d listings, want none", n)
	}
}

// A periodic resync after a foreign change lists and repairs it: here an
// element of ours deleted by hand (the periodic listing reads elements;
// it trusts the recorded content of chains that still exist, as before).
func TestPeriodicResyncAfterForeignElementDeleteRepairs(t *testing.T) {
	f := newResyncFixture(t, nil)
	ctx := context.Background()
	elems, err := f.fakes.NFTables.ListElements(ctx, "map", "service-ips")
	if err != nil || len(elems) == 0 {
		t.Fatalf("service-ips: %v %v", elems, err)
	}
	tx := f.fakes.NFTables.NewTransaction()
	tx.Delete(&knftables.Element{Map: "service-ips", Key: elems[0].Key})
	if err := f.fakes.NFTables.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	out, n := f.periodic(t)
	if n == 0 || out.Result.Writes == 0 {
		t.Errorf("periodic resync after a foreign element delete: %d listings, %d writes", n, out.Result.Writes)
	}
	if got := sortedLines(f.fakes.Dump()); got != sortedLines(f.want) {
		t.Errorf("not repaired:\n%s", got)
	}
}

// sortedLines sorts a dump's lines (a re-added element lists last).
func sortedLines(s string) string {
	l := strings.Split(s, "\n")
	sort.Strings(l)
	return strings.Join(l, "\n")
}

// racingFake commits a foreign transaction (in the other family) right
// after each of the engine's own: the generation moves by two, so the
// engine must not keep custody.
type racingFake struct {
	*nftablestest.Fake
	other *nftablestest.Fake
	race  bool
}

func (r *racingFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := r.Fake.Run(ctx, tx); err != nil {
		return err
	}
	if r.race {
		t := r.other.NewTransaction()
		t.Add(&knftables.Table{})
		return r.other.Run(ctx, t)
	}
	return nil
}

func TestForeignCommitRacingOursLosesCustody(t *testing.T) {
	var rf *racingFake
	f := newResyncFixture(t, func(fk *nftablestest.Fakes) nftables.Interfaces {
		rf = &racingFake{Fake: fk.NFTables, other: fk.Other}
		i := fk.Interfaces()
		i.NFTables = rf
		return i
	})
	rf.race = true
	f.p.OnEndpointSliceUpdate(f.c.slices[0], makeSlice(0, 2, 9))
	if out := mustSync(t, f.p); out.Full || out.Result.Writes == 0 {
		t.Fatalf("partial sync: %+v", out)
	}
	rf.race = false
	if _, n := f.periodic(t); n == 0 {
		t.Error("resync after a commit that raced ours listed nothing")
	}
	if _, n := f.periodic(t); n != 0 {
		t.Errorf("next resync: %d listings, want none", n)
	}
}

// No generation (no reader, or a failing read): every full resync lists.
func TestResyncWithoutGenerationLists(t *testing.T) {
	f := newResyncFixture(t, nil)
	f.fakes.NFTables.FailOn("Generation", 1, errors.New("no netlink"))
	if _, n := f.periodic(t); n == 0 {
		t.Error("resync with a failing generation read listed nothing")
	}
	g := newResyncFixture(t, func(fk *nftablestest.Fakes) nftables.Interfaces {
		i := fk.Interfaces()
		i.Generation = nil
		return i
	})
	if _, n := g.periodic(t); n == 0 {
		t.Error("resync without a generation reader listed nothing")
	}
	// A start always lists.
	h := nftablestest.NewFakes(v1.IPv4Protocol)
	q := newTestProxier(t, h, testConfig())
	makeCluster(3, 1).feed(q)
	mustSync(t, q)
	if h.NFTables.Listings() == 0 {
		t.Error("the first sync listed nothing")
	}
}

// A full resync over elements added by hand deletes them and puts back
// what was replaced, whatever their form: keys of forms the engine never
// writes (a protocol nft names, a port in place of a protocol, a hairpin
// entry of two addresses) and values it never writes (accept, continue)
// included.
func TestResyncDeletesForeignElements(t *testing.T) {
	f := newResyncFixture(t, nil)
	ctx := context.Background()
	elems, err := f.fakes.NFTables.ListElements(ctx, "map", "service-ips")
	if err != nil || len(elems) == 0 {
		t.Fatalf("service-ips: %v %v", elems, err)
	}
	tx := f.fakes.NFTables.NewTransaction()
	tx.Delete(&knftables.Element{Map: "service-ips", Key: elems[0].Key})
	tx.Add(&knftables.Element{Map: "service-ips", Key: elems[0].Key, Value: []string{"accept"}})
	for _, e := range []*knftables.Element{
		{Map: "service-ips", Key: []string{"10.0.0.99", "gre", "80"}, Value: []string{"drop"}},
		{Map: "service-ips", Key: []string{"10.0.0.98", "tcp", "81"}, Value: []string{"continue"}},
		{Map: "service-nodeports", Key: []string{"30000", "tcp"}, Value: []string{"drop"}},
		{Set: "cluster-ips", Key: []string{"10.0.0.97"}},
		{Set: "hairpin-connections", Key: []string{"10.0.0.1", "10.0.0.1", "6", "80"}},
		{Set: "hairpin-connections", Key: []string{"10.0.0.1", "10.0.0.2", "tcp", "80"}},
	} {
		tx.Add(e)
	}
	if err := f.fakes.NFTables.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	f.p.RequestFullSync()
	if out := mustSync(t, f.p); !out.Full || out.Result.Writes == 0 {
		t.Fatalf("want a full sync that writes, got %+v", out)
	}
	if got := sortedLines(f.fakes.Dump()); got != sortedLines(f.want) {
		t.Errorf("foreign elements not deleted:\n%s", got)
	}
}

// A periodic or requested resync over an unchanged table plans again only
// the services the change tracker reports changed since the last sync:
// every other one's recorded plan is taken as it is (the same plan), and
// the table ends as a cold start on a fresh table would write it.
func TestResyncPlansOnlyChangedServices(t *testing.T) {
	f := newResyncFixture(t, nil)
	unchanged := nftables.RecordedPlanForTest(f.p, "ns", "svc-5")
	changed := nftables.RecordedPlanForTest(f.p, "ns", "svc-3")
	if unchanged == nil || changed == nil {
		t.Fatal("no recorded plans")
	}
	// A change pending when the full resync runs.
	f.p.OnEndpointSliceUpdate(f.c.slices[3], makeSlice(3, 2, 9))
	f.c.slices[3] = makeSlice(3, 2, 9)
	f.p.RequestFullSync()
	f.fakes.NFTables.ResetCalls()
	out := mustSync(t, f.p)
	if !out.Full || f.fakes.NFTables.Listings() != 0 || out.Result.Writes == 0 {
		t.Fatalf("requested resync with a change pending: full=%v, %d listings, %d writes", out.Full, f.fakes.NFTables.Listings(), out.Result.Writes)
	}
	if got := nftables.RecordedPlanForTest(f.p, "ns", "svc-5"); got != unchanged {
		t.Error("an unchanged service was planned again")
	}
	if got := nftables.RecordedPlanForTest(f.p, "ns", "svc-3"); got == changed {
		t.Error("the changed service was not planned again")
	}
	fresh := nftablestest.NewFakes(v1.IPv4Protocol)
	q := newTestProxier(t, fresh, testConfig())
	f.c.feed(q)
	mustSync(t, q)
	// The resync left flushed endpoint chains of svc-3 to delete later.
	f.clk.Step(2 * time.Second)
	f.p.RequestFullSync()
	mustSync(t, f.p)
	if got, want := sortedLines(f.fakes.Dump()), sortedLines(fresh.Dump()); got != want {
		t.Errorf("table after the resync:\n%s\nwant (a cold start):\n%s", got, want)
	}
	if out, n := f.periodic(t); n != 0 || out.Result.Writes != 0 {
		t.Errorf("next periodic resync: %d listings, %d writes; want none", n, out.Result.Writes)
	}
}

// A fault in the engine's own record (a chain recorded with another
// content than the table holds, nothing foreign committed) is still
// written out by a full resync that trusts the generation: the service
// whose record the state does not hold is planned again and its chain
// rewritten.
func TestResyncRewritesAFaultOfTheRecord(t *testing.T) {
	f := newResyncFixture(t, nil)
	var victim string
	for name := range f.fakes.NFTables.Table.Chains {
		if strings.HasPrefix(name, "service-") && strings.Contains(name, "/svc-7/") {
			victim = name
		}
	}
	if !nftables.SpoilRecordedChainForTest(f.p, victim) {
		t.Fatalf("no recorded chain %q", victim)
	}
	before := nftables.RecordedPlanForTest(f.p, "ns", "svc-7")
	out, n := f.periodic(t)
	if n != 0 || out.Result.Writes == 0 {
		t.Fatalf("periodic resync over a spoiled record: %d listings, %d writes; want none and a rewrite", n, out.Result.Writes)
	}
	if !strings.Contains(f.fakes.NFTables.LastTransaction.String(), victim) {
		t.Errorf("the resync did not rewrite %s:\n%s", victim, f.fakes.NFTables.LastTransaction.String())
	}
	if nftables.RecordedPlanForTest(f.p, "ns", "svc-7") == before {
		t.Error("the service of the spoiled chain was not planned again")
	}
	if got := f.fakes.Dump(); got != f.want {
		t.Errorf("table changed:\n%s", got)
	}
	if out, n := f.periodic(t); n != 0 || out.Result.Writes != 0 {
		t.Errorf("next periodic resync: %d listings, %d writes; want none", n, out.Result.Writes)
	}
}

// A service whose record holds keeps its elements through a full resync
// where another service, planned again, drops one of them: two services
// holding the same cluster IP (bad input, as a stale file source can give;
// a set's elements do not conflict) share its cluster-ips element, and
// when the first moves to another address the element stays for the kept
// second one (removeUnwanted finds it in the kept plan), as a cold start
// writes it.
func TestResyncKeptServiceKeepsASharedElement(t *testing.T) {
	f := newResyncFixture(t, nil)
	first, second := f.c.services[1], f.c.services[2].DeepCopy()
	second.Spec.ClusterIP, second.Spec.ClusterIPs = first.Spec.ClusterIP, first.Spec.ClusterIPs
	second.Spec.Ports[0].Port = 81 // its own service-ips key
	f.p.OnServiceUpdate(f.c.services[2], second)
	f.c.services[2] = second
	mustSync(t, f.p)
	kept := nftables.RecordedPlanForTest(f.p, "ns", "svc-2")
	if kept == nil {
		t.Fatal("no recorded plan for svc-2")
	}

	moved := first.DeepCopy()
	moved.Spec.ClusterIP, moved.Spec.ClusterIPs = "10.96.9.9", []string{"10.96.9.9"}
	f.p.OnServiceUpdate(first, moved)
	f.c.services[1] = moved
	f.p.RequestFullSync()
	out := mustSync(t, f.p)
	if !out.Full {
		t.Fatalf("want a full resync, got %+v", out)
	}
	if nftables.RecordedPlanForTest(f.p, "ns", "svc-2") != kept {
		t.Fatal("svc-2 was planned again: the resync did not take the path under test")
	}
	fresh := nftablestest.NewFakes(v1.IPv4Protocol)
	q := newTestProxier(t, fresh, testConfig())
	f.c.feed(q)
	mustSync(t, q)
	if got, want := sortedLines(f.fakes.Dump()), sortedLines(fresh.Dump()); got != want {
		t.Errorf("table after the resync:\n%s\nwant (a cold start):\n%s", got, want)
	}
}
