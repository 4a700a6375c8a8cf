package ipvs_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// runDriftEnv runs a proxier with a real clock, a 20 ms drift check and no
// periodic syncs to speak of, after its first full sync.
func runDriftEnv(t *testing.T) (*env, func()) {
	t.Helper()
	e := newEnv(t, config(engine.Common{
		Clock: clock.RealClock{}, MinSyncPeriod: -1, SyncPeriod: time.Hour, DriftCheckInterval: 20 * time.Millisecond,
	}))
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withNodePort(30080)))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	e.synced()
	e.sync(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx) }()
	return e, func() {
		cancel()
		<-done
	}
}

// eventually polls cond for up to 20 s (the drift check runs every 20 ms:
// this is a bound for a loaded machine, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDriftRepairsFlushedRules: a hand flush of the nat table (every
// chain's rules, the built-in chains' jumps included) or of one of our
// filter chains is found by the drift check and repaired by a full sync.
func TestDriftRepairsFlushedRules(t *testing.T) {
	e, stop := runDriftEnv(t)
	defer stop()
	want := e.ipt.Dump()
	ctx := context.Background()
	flush := func(table xtables.Table) {
		chains, err := e.ipt.Chains(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chains {
			if err := e.ipt.FlushChain(ctx, table, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush(xtables.TableNAT) // iptables -t nat -F
	eventually(t, "nat table repaired", func() bool { return e.ipt.Dump() == want })
	if err := e.ipt.FlushChain(ctx, xtables.TableFilter, ipvs.ChainIPVSFilter); err != nil {
		t.Fatal(err)
	}
	eventually(t, "KUBE-IPVS-FILTER repaired", func() bool { return e.ipt.Dump() == want })
	if st := e.p.Stats(); st.Last.Reason != engine.ReasonDrift || !st.Last.Full {
		t.Errorf("last sync %+v, want a full sync for drift", st.Last)
	}
}

// TestDriftRepairsKubeIPVS0: an address removed from kube-ipvs0, or the
// link itself deleted, is found and repaired.
func TestDriftRepairsKubeIPVS0(t *testing.T) {
	e, stop := runDriftEnv(t)
	defer stop()
	want := e.nl.Dump(ipvs.DummyDevice)
	if err := e.nl.UnbindAddress(netip.MustParseAddr("10.96.0.10"), ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	eventually(t, "address rebound", func() bool { return e.nl.Dump(ipvs.DummyDevice) == want })
	if err := e.nl.DeleteDummyDevice(ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	eventually(t, "link recreated", func() bool { return e.nl.Dump(ipvs.DummyDevice) == want })
}

// TestNoDriftNoFullSync: over an untouched node the drift check finds
// nothing, and it only reads (no sync, no write).
func TestNoDriftNoFullSync(t *testing.T) {
	e, stop := runDriftEnv(t)
	e.resetCalls()
	eventually(t, "three drift checks", func() bool { return e.ipt.CallsOf("SaveInto") >= 6 })
	stop()
	if st := e.p.Stats(); st.FullSyncs != 1 {
		t.Errorf("%d full syncs over an untouched node, want 1: %+v", st.FullSyncs, st.Last)
	}
	if n := e.mutations() + e.ipt.CallsOf("Restore", "EnsureRule", "FlushChain"); n != 0 {
		t.Errorf("drift checks wrote %d times: %v %v", n, e.ipt.Calls(), e.ipvs.Calls())
	}
	if !strings.Contains(e.ipt.Dump(), "KUBE-IPVS-FILTER") {
		t.Error("rules gone")
	}
}
