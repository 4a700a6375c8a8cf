package iptables_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

func isFullRestore(data []byte) bool {
	return strings.Contains(string(data), ":KUBE-SERVICES - [0:0]")
}

// A failed restore is returned as a typed error and counted; the tracker's
// state is kept and the next sync is a full one that converges.
func TestFailedRestoreKeepsStateAndNextSyncIsFull(t *testing.T) {
	m := metrics.New()
	cfg := ipv4Config
	cfg.Metrics = m
	p, fake := newTestProxier(t, cfg, v1.IPv4Protocol)
	s1 := svc("ns", "a", "172.30.0.1", nodePort(30001))
	p.OnServiceAdd(s1)
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	mustSync(t, p)

	// A change whose partial restore fails.
	p.OnServiceAdd(svc("ns", "b", "172.30.0.2"))
	p.OnEndpointSliceAdd(slice("ns", "b", "", ep{ip: "10.0.0.2"}))
	boom := errors.New("boom")
	fake.FailOn("Restore", 1, boom)
	err := p.Sync(context.Background())
	var se *engine.SyncError
	if !errors.As(err, &se) || se.Full || !errors.Is(err, boom) {
		t.Fatalf("Sync error = %v, want a partial *engine.SyncError wrapping boom", err)
	}
	if got := testutil.ToFloat64(m.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("restore failures counted = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.IPTablesPartialRestoreFailuresTotal.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("partial restore failures counted = %v, want 1", got)
	}

	// No further event: the next sync is full and writes both services.
	fake.ResetStats()
	mustSync(t, p)
	if !isFullRestore(fake.Stats().LastRestore) {
		t.Fatalf("sync after a failure was not full:\n%s", fake.Stats().LastRestore)
	}
	want := fullDumpOf(t, ipv4Config, func(q *Proxier) {
		q.OnServiceAdd(s1)
		q.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
		q.OnServiceAdd(svc("ns", "b", "172.30.0.2"))
		q.OnEndpointSliceAdd(slice("ns", "b", "", ep{ip: "10.0.0.2"}))
	})
	if got := normalizedDump(fake.Dump()); got != want {
		t.Fatalf("after recovery:\n%s", lineDiff(want, got))
	}

	// A failing full sync (the first one) also reports Full.
	q, qfake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	qfake.FailAfter("Restore", 1, 1, boom) // after ensureBase's restore
	if err := q.Sync(context.Background()); !errors.As(err, &se) || !se.Full {
		t.Fatalf("first Sync error = %v, want a full *engine.SyncError", err)
	}
	mustSync(t, q)
}

func fullDumpOf(t *testing.T, cfg Config, load func(*Proxier)) string {
	t.Helper()
	p, fake := newTestProxier(t, cfg, v1.IPv4Protocol)
	load(p)
	mustSync(t, p)
	return normalizedDump(fake.Dump())
}

func TestNotSynced(t *testing.T) {
	fake := newBareFake()
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}}, Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1"))
	if err := p.Sync(context.Background()); !errors.Is(err, proxy.ErrNotSynced) {
		t.Fatalf("Sync before synced = %v, want ErrNotSynced", err)
	}
	if fake.Stats().Restores != 0 || fake.Stats().Commands != 0 {
		t.Fatalf("Sync before synced touched the tables: %+v", fake.Stats())
	}
}

// A flush of our chains behind our back (the canary gone with them) is
// detected by the drift check and repaired by Run within one drift-check
// interval (2 s), long before the hourly full sync; driven by a fake clock.
func TestCanaryRepairWithinDriftCheckInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := ipv4Config
	cfg.Clock = clk
	cfg.SyncPeriod = time.Hour
	p, fake := newTestProxier(t, cfg, v1.IPv4Protocol)
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1", nodePort(30001)))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// The first sync done (not its first restore: the base restore comes
	// before the rules, and the dump would be taken half way).
	waitFor(t, "first sync", func() bool { return !p.Stats().LastSuccess.IsZero() })
	want := fake.Dump()

	// Someone flushes nat and deletes the canaries.
	for _, c := range []xtables.Chain{xtables.ChainKubeServices, ChainKubeNodePorts, xtables.ChainKubePostrouting} {
		if err := fake.FlushChain(ctx, xtables.TableNAT, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range []xtables.Table{xtables.TableMangle, xtables.TableNAT, xtables.TableFilter} {
		if err := fake.DeleteChain(ctx, tb, xtables.ChainKubeProxyCanary); err != nil {
			t.Fatal(err)
		}
	}
	if fake.Dump() == want {
		t.Fatal("test setup: flush changed nothing")
	}
	// One drift-check interval: the check fires, the full sync repairs.
	waitFor(t, "runner waiting", clk.HasWaiters)
	clk.Step(engine.DefaultDriftCheckInterval)
	waitFor(t, "repair", func() bool { return fake.Dump() == want })
	if st := p.Stats(); st.Last.Reason != engine.ReasonDrift || !st.Last.Full {
		t.Errorf("last sync %+v, want a full sync for drift", st.Last)
	}
	if got := fake.Dump(); got != want {
		t.Fatalf("not repaired:\n%s", lineDiff(want, got))
	}
}

// waitFor polls cond for up to 10s (a bound on a test hang, not a timing
// assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 2000; i++ {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// conntrackRecorder records what the engine asks to delete.
type conntrackRecorder struct{ got []conntrack.Filter }

func (c *conntrackRecorder) DeleteUDP(ipv6 bool, filters []conntrack.Filter) (uint, error) {
	c.got = append(c.got, filters...)
	return uint(len(filters)), nil
}

func TestConntrackCleaning(t *testing.T) {
	ct := &conntrackRecorder{}
	cfg := ipv4Config
	cfg.Conntrack = ct
	p, _ := newTestProxier(t, cfg, v1.IPv4Protocol)
	dns := svc("ns", "dns", "172.30.0.10", udp, nodePort(30053))
	p.OnServiceAdd(dns)
	mustSync(t, p) // no endpoints: rejected
	ct.got = nil
	s1 := slice("ns", "dns", v1.ProtocolUDP, ep{ip: "10.0.0.1"}, ep{ip: "10.0.0.2"})
	p.OnEndpointSliceAdd(s1)
	mustSync(t, p) // newly active: entries to the VIP and node port go
	wantHas(t, ct.got, conntrack.Filter{OrigDst: mustAddr("172.30.0.10"), OrigDstPort: 80}, conntrack.Filter{OrigDstPort: 30053})

	ct.got = nil
	p.OnEndpointSliceUpdate(s1, slice("ns", "dns", v1.ProtocolUDP, ep{ip: "10.0.0.1"}))
	mustSync(t, p) // endpoint gone: entries DNATed to it go
	wantHas(t, ct.got, conntrack.Filter{OrigDst: mustAddr("172.30.0.10"), ReplySrc: mustAddr("10.0.0.2")},
		conntrack.Filter{OrigDstPort: 30053, ReplySrc: mustAddr("10.0.0.2")})

	ct.got = nil
	p.OnServiceDelete(dns)
	mustSync(t, p) // cluster IP gone
	wantHas(t, ct.got, conntrack.Filter{OrigDst: mustAddr("172.30.0.10")})
}

// As kube-proxy v1.37 (kubernetes#139629): a UDP service scaled to zero
// loses the entries DNATed to its last endpoints, at every frontend; as
// kube-proxy v1.38 (kubernetes#141371), adopted: a deleted UDP service
// loses every entry to its external and load-balancer IPs at its port,
// not only those to its cluster IP. The kernel half is the conformance
// scenario "udp-conntrack" (real datagrams, real entries).
func TestConntrackCleaningScaleToZeroAndDelete(t *testing.T) {
	ct := &conntrackRecorder{}
	cfg := ipv4Config
	cfg.Conntrack = ct
	p, _ := newTestProxier(t, cfg, v1.IPv4Protocol)
	dns := svc("ns", "dns", "172.30.0.10", udp, loadBalancer(30053, "192.0.2.7"), externalIPs("198.51.100.9"))
	s1 := slice("ns", "dns", v1.ProtocolUDP, ep{ip: "10.0.0.1"})
	p.OnServiceAdd(dns)
	p.OnEndpointSliceAdd(s1)
	mustSync(t, p)

	ct.got = nil
	p.OnEndpointSliceUpdate(s1, slice("ns", "dns", v1.ProtocolUDP))
	mustSync(t, p) // scaled to zero
	ep1 := mustAddr("10.0.0.1")
	wantHas(t, ct.got,
		conntrack.Filter{OrigDst: mustAddr("172.30.0.10"), ReplySrc: ep1},
		conntrack.Filter{OrigDst: mustAddr("198.51.100.9"), ReplySrc: ep1},
		conntrack.Filter{OrigDst: mustAddr("192.0.2.7"), ReplySrc: ep1},
		conntrack.Filter{OrigDstPort: 30053, ReplySrc: ep1})

	ct.got = nil
	p.OnServiceDelete(dns)
	mustSync(t, p)
	wantHas(t, ct.got,
		conntrack.Filter{OrigDst: mustAddr("172.30.0.10")},
		conntrack.Filter{OrigDst: mustAddr("198.51.100.9"), OrigDstPort: 80},
		conntrack.Filter{OrigDst: mustAddr("192.0.2.7"), OrigDstPort: 80})
	for _, f := range ct.got {
		if f.OrigDstPort == 30053 && !f.OrigDst.IsValid() && !f.ReplySrc.IsValid() {
			t.Errorf("filter %v matches every entry to port 30053 on any address; kube-proxy leaves node ports of deleted services", f)
		}
	}
}

func wantHas(t *testing.T, got []conntrack.Filter, want ...conntrack.Filter) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w {
				found = true
			}
		}
		if !found {
			t.Errorf("conntrack filters %v lack %v", got, w)
		}
	}
}

// Cleanup removes what the engine made and leaves the rest.
func TestCleanup(t *testing.T) {
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	ctx := context.Background()
	if _, err := fake.EnsureChain(ctx, xtables.TableNAT, xtables.ChainKubeletCanary); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.EnsureChain(ctx, xtables.TableFilter, "OTHER"); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.EnsureRule(ctx, xtables.Append, xtables.TableFilter, xtables.ChainInput, "-s", "1.2.3.4", "-j", "OTHER"); err != nil {
		t.Fatal(err)
	}
	// (Touch mangle so that the table exists in both dumps.)
	if _, err := fake.EnsureChain(ctx, xtables.TableMangle, "TMP"); err != nil {
		t.Fatal(err)
	}
	if err := fake.DeleteChain(ctx, xtables.TableMangle, "TMP"); err != nil {
		t.Fatal(err)
	}
	before := fake.Dump()
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1", loadBalancer(30001, "1.1.1.1", "10.0.0.0/8")))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	mustSync(t, p)
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fake.Dump(); got != before {
		t.Fatalf("after Cleanup:\n%s", lineDiff(before, got))
	}
}

var _ = netip.Addr{}

// A full sync reads each table once and runs iptables commands only for
// what is missing: a deleted jump rule is put back, nothing else is run.
func TestFullSyncEnsuresOnlyWhatIsMissing(t *testing.T) {
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1"))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	mustSync(t, p)
	want := fake.Dump()

	fake.ResetStats()
	p.RequestFullSync()
	mustSync(t, p)
	if st := fake.Stats(); st.Commands != 0 {
		t.Errorf("full sync with everything in place ran %d iptables commands, want 0", st.Commands)
	}

	ctx := context.Background()
	if err := fake.DeleteRule(ctx, xtables.TableNAT, xtables.ChainPrerouting, "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"); err != nil {
		t.Fatal(err)
	}
	if fake.Dump() == want {
		t.Fatal("test setup: the jump rule was not deleted")
	}
	p.RequestFullSync()
	mustSync(t, p)
	if got := fake.Dump(); got != want {
		t.Fatalf("jump rule not restored:\n%s", lineDiff(want, got))
	}
}
