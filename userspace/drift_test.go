package userspace_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// A hand flush of the whole nat table (jumps, our chains, the canary) is
// noticed by the drift check and repaired by the full sync it starts, with
// no service change and long before the hourly full sync. Before the
// engine base the userspace engine left it broken until then.
func TestDriftRepairsFlushedNATTable(t *testing.T) {
	fakes := userspacetest.NewFakes(v1.IPv4Protocol)
	var mu sync.Mutex
	var drifts int
	p, err := userspace.NewProxier(userspace.Config{
		Common: engine.Common{NodeName: "node-a", DriftCheckInterval: 20 * time.Millisecond,
			SyncPeriod: time.Hour, MinSyncPeriod: -1,
			OnSync: func(o engine.SyncOutcome) {
				if o.Err == nil && o.Full && o.Reason == engine.ReasonDrift {
					mu.Lock()
					drifts++
					mu.Unlock()
				}
			}},
		HostIP: netip.MustParseAddr("192.168.50.10"),
	}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnServiceAdd(nodePortService())
	p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const rule = "-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32"
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for range 1000 { // 10s at most: the target is within 5s
			if cond() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("timed out waiting for %s:\n%s", what, fakes.Dump())
	}
	waitFor("the first sync", func() bool { return strings.Contains(fakes.IPTables.Dump(), rule) })
	before := p.Stats().FullSyncs

	// iptables -t nat -F: every chain of the table emptied, none deleted.
	chains, err := fakes.IPTables.Chains(xtables.TableNAT)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		if err := fakes.IPTables.FlushChain(context.Background(), xtables.TableNAT, c); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the flushed nat table to be repaired", func() bool {
		d := fakes.IPTables.Dump()
		return strings.Contains(d, rule) && strings.Contains(d, "-A PREROUTING -m comment --comment \"handle ClusterIPs")
	})
	mu.Lock()
	n := drifts
	mu.Unlock()
	if n != 1 || p.Stats().FullSyncs != before+1 {
		t.Errorf("%d full syncs for drift (%d full in all), want 1", n, p.Stats().FullSyncs-before)
	}

	// Deleting our chains (after unhooking them) is drift too.
	if err := userspace.CleanupLeftovers(context.Background(), fakes.IPTables); err != nil {
		t.Fatal(err)
	}
	waitFor("the deleted chains to be rewritten", func() bool { return strings.Contains(fakes.IPTables.Dump(), rule) })
}

// The drift check costs one command per canary and, on a correct node,
// writes nothing and finds no drift; a check that fails (the xtables lock
// held) is an error, not drift.
func TestDriftCheckIsCheap(t *testing.T) {
	fakes := userspacetest.NewFakes(v1.IPv4Protocol)
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a"}, HostIP: netip.MustParseAddr("192.168.50.10")},
		fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnServiceAdd(nodePortService())
	p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := fakes.IPTables.Dump()
	fakes.IPTables.ResetCalls()
	drifted, err := userspace.Drifted(context.Background(), p)
	if err != nil || drifted {
		t.Fatalf("Drifted on a correct node = %v, %v", drifted, err)
	}
	if n := fakes.IPTables.CallsOf("EnsureRule"); n != 2 {
		t.Errorf("drift check ran %d EnsureRule, want 2 (one per canary); calls %v", n, fakes.IPTables.Calls())
	}
	if after := fakes.IPTables.Dump(); after != before {
		t.Errorf("drift check changed the rules:\n%s\nwant:\n%s", after, before)
	}
	boom := errors.New("xtables lock held")
	fakes.IPTables.FailOn("EnsureRule", 1, boom)
	if drifted, err := userspace.Drifted(context.Background(), p); drifted || !errors.Is(err, boom) {
		t.Errorf("Drifted with the lock held = %v, %v; want false and the error", drifted, err)
	}
}
