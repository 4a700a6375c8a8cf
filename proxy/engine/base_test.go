package engine

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// waitLimit only guards against a hung loop; no result depends on timing.
const waitLimit = 20 * time.Second

// recorder is a test engine: it records every request it is handed.
type recorder struct {
	mu       sync.Mutex
	reqs     []Request
	services []int // len(Update.Services) per request
	fail     error
	drifted  bool
	result   Result
	closed   int
	syncs    chan Request
}

func (r *recorder) hooks() Hooks {
	return Hooks{
		Name: "test",
		Apply: func(_ context.Context, req *Request) (Result, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reqs = append(r.reqs, *req)
			r.services = append(r.services, len(req.Update.Services))
			if r.syncs != nil {
				select {
				case r.syncs <- *req:
				default:
				}
			}
			return r.result, r.fail
		},
		DryRun: func(_ context.Context, req *Request) (string, error) {
			return "plan of " + string(req.Reason), nil
		},
		Drifted: func(context.Context) (bool, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			d := r.drifted
			r.drifted = false
			return d, nil
		},
		Close: func() error { r.closed++; return nil },
	}
}

func (r *recorder) last() Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs[len(r.reqs)-1]
}

func service(name, ip string, proto v1.Protocol) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []v1.ServicePort{{Name: "p", Port: 53, Protocol: proto}}},
	}
}

func slice(svc, ip string, proto v1.Protocol) *discovery.EndpointSlice {
	ready, port, name := true, int32(5353), "p"
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: svc + "-1", Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{ip}, Conditions: discovery.EndpointConditions{Ready: &ready}}},
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
}

func newBase(t *testing.T, cfg Common, r *recorder) *Base {
	t.Helper()
	cfg.Logger = testr.New(t)
	b, err := New(cfg, r.hooks())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func synced(b *Base) {
	b.OnServiceSynced()
	b.OnEndpointSlicesSynced()
}

func TestSyncFullPartialAndFailure(t *testing.T) {
	r := &recorder{}
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	var outcomes []SyncOutcome
	b := newBase(t, Common{Clock: clk, FullSyncPeriod: time.Hour, OnSync: func(o SyncOutcome) { outcomes = append(outcomes, o) }}, r)
	ctx := context.Background()

	b.OnServiceAdd(service("a", "10.0.0.1", v1.ProtocolTCP))
	if err := b.Sync(ctx); !errors.Is(err, proxy.ErrNotSynced) {
		t.Fatalf("Sync before synced = %v, want ErrNotSynced", err)
	}
	if len(r.reqs) != 0 {
		t.Fatal("Apply called before the initial lists were synced")
	}
	synced(b)
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonInitial {
		t.Fatalf("first sync: full=%v reason=%q, want full initial", req.Full, req.Reason)
	}
	mustSync(t, b)
	if req := r.last(); req.Full || req.Reason != ReasonNone {
		t.Fatalf("second sync: full=%v reason=%q, want partial", req.Full, req.Reason)
	}

	// A failure keeps the tracker's state: the next sync is full and sees
	// the service added before the failed one.
	boom := errors.New("boom")
	r.fail = boom
	b.OnServiceAdd(service("b", "10.0.0.2", v1.ProtocolTCP))
	err := b.Sync(ctx)
	var se *SyncError
	if !errors.Is(err, boom) || !errors.As(err, &se) || se.Engine != "test" || se.Family != v1.IPv4Protocol {
		t.Fatalf("failed sync = %v, want a *SyncError wrapping boom", err)
	}
	if s := b.Stats(); s.Failures != 1 || s.ConsecutiveFailures != 1 || s.Last.Err == nil {
		t.Fatalf("Stats after failure = %+v", s)
	}
	r.fail = nil
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonFailure || len(req.Update.Services) != 2 {
		t.Fatalf("sync after failure: full=%v reason=%q services=%d, want full, failure, 2", req.Full, req.Reason, len(req.Update.Services))
	}

	clk.Step(time.Hour)
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonPeriodic {
		t.Fatalf("after FullSyncPeriod: full=%v reason=%q", req.Full, req.Reason)
	}

	b.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "", Labels: map[string]string{"topology.kubernetes.io/zone": "z"}}})
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonNode {
		t.Fatalf("after node labels changed: full=%v reason=%q", req.Full, req.Reason)
	}

	r.result = Result{Full: true}
	mustSync(t, b)
	if o := outcomes[len(outcomes)-1]; !o.Full || o.Reason != ReasonEngine {
		t.Fatalf("engine-chosen full sync reported as full=%v reason=%q", o.Full, o.Reason)
	}
	if len(outcomes) != len(r.reqs) {
		t.Fatalf("OnSync called %d times for %d syncs", len(outcomes), len(r.reqs))
	}
	if s := b.Stats(); s.Syncs != uint64(len(r.reqs)) || s.ConsecutiveFailures != 0 || s.FullSyncs != 5 {
		t.Fatalf("Stats = %+v", s)
	}
}

func mustSync(t *testing.T, b *Base) {
	t.Helper()
	if err := b.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// fakeCleaner records the conntrack filters it is asked to delete.
type fakeCleaner struct{ filters []conntrack.Filter }

func (f *fakeCleaner) DeleteUDP(_ bool, filters []conntrack.Filter) (uint, error) {
	f.filters = append(f.filters, filters...)
	return uint(len(filters)), nil
}

func TestStaleUDPConntrackKeptAcrossFailures(t *testing.T) {
	r := &recorder{}
	ct := &fakeCleaner{}
	b := newBase(t, Common{Conntrack: ct}, r)
	b.OnServiceAdd(service("dns", "10.0.0.10", v1.ProtocolUDP))
	synced(b)
	mustSync(t, b)

	// The service goes from no endpoints to one: its entries must go.
	b.OnEndpointSliceAdd(slice("dns", "10.1.0.5", v1.ProtocolUDP))
	r.fail = errors.New("boom")
	if err := b.Sync(context.Background()); err == nil {
		t.Fatal("want the injected failure")
	}
	if len(ct.filters) != 0 {
		t.Fatal("conntrack cleaned after a failed sync")
	}
	r.fail = nil
	r.result = Result{Conntrack: []conntrack.Filter{{OrigDstPort: 30053}}}
	mustSync(t, b)
	want := []conntrack.Filter{{OrigDst: netip.MustParseAddr("10.0.0.10"), OrigDstPort: 53}, {OrigDstPort: 30053}}
	if len(ct.filters) != len(want) || ct.filters[0] != want[0] || ct.filters[1] != want[1] {
		t.Fatalf("conntrack filters = %v, want %v", ct.filters, want)
	}
}

func gather(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	return 0
}

func TestMetricsMove(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := metrics.New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	b := newBase(t, Common{Metrics: m}, r)
	b.OnServiceAdd(service("a", "10.0.0.1", v1.ProtocolTCP))
	b.OnServiceAdd(service("b", "10.0.0.2", v1.ProtocolTCP))
	sl := slice("a", "10.1.0.1", v1.ProtocolTCP)
	sl.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
	b.OnEndpointSliceAdd(sl)
	synced(b)
	for name, want := range map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_total":    2,
		"kubeproxy_sync_proxy_rules_service_changes_pending":  2,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":   1,
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending": 1,
	} {
		if got := gather(t, reg, name); got != want {
			t.Errorf("before sync: %s = %v, want %v", name, got, want)
		}
	}
	if gather(t, reg, "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds") == 0 {
		t.Error("last queued timestamp not set")
	}
	mustSync(t, b)
	mustSync(t, b)
	for name, want := range map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_pending":  0,
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending": 0,
		"kubeproxy_sync_proxy_rules_duration_seconds":         2,
		"kubeproxy_sync_full_proxy_rules_duration_seconds":    1,
		"kubeproxy_sync_partial_proxy_rules_duration_seconds": 1,
		"kubeproxy_network_programming_duration_seconds":      1,
	} {
		if got := gather(t, reg, name); got != want {
			t.Errorf("after two syncs: %s = %v, want %v", name, got, want)
		}
	}
	if gather(t, reg, "kubeproxy_sync_proxy_rules_last_timestamp_seconds") == 0 {
		t.Error("last sync timestamp not set")
	}
}

func TestDryRunCloseAndCleanup(t *testing.T) {
	r := &recorder{}
	cleaned := 0
	h := r.hooks()
	h.Cleanup = func(context.Context) error { cleaned++; return nil }
	b, err := New(Common{Logger: testr.New(t)}, h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.DryRun(context.Background()); !errors.Is(err, proxy.ErrNotSynced) {
		t.Fatalf("DryRun before synced = %v", err)
	}
	synced(b)
	mustSync(t, b)
	out, err := b.DryRun(context.Background())
	if err != nil || out != "plan of dry-run" {
		t.Fatalf("DryRun = %q, %v", out, err)
	}
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonDryRun {
		t.Fatalf("sync after a dry run: full=%v reason=%q, want full dry-run", req.Full, req.Reason)
	}
	if err := b.Cleanup(context.Background()); err != nil || cleaned != 1 {
		t.Fatalf("Cleanup = %v, cleaned %d", err, cleaned)
	}
	mustSync(t, b)
	if req := r.last(); !req.Full || req.Reason != ReasonCleanup {
		t.Fatalf("sync after cleanup: full=%v reason=%q", req.Full, req.Reason)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil || r.closed != 1 {
		t.Fatalf("second Close = %v, engine closed %d times", err, r.closed)
	}
	if err := b.Sync(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close = %v, want ErrClosed", err)
	}
	if err := b.Cleanup(context.Background()); err != nil || cleaned != 2 {
		t.Fatalf("Cleanup after Close = %v, cleaned %d times; want it to run", err, cleaned)
	}
}

// With drift checks every few milliseconds, Run still syncs every
// SyncPeriod (the checks do not postpone the periodic sync), and a check
// that finds nothing causes no sync.
func TestDriftChecksKeepPeriodicSyncs(t *testing.T) {
	r := &recorder{syncs: make(chan Request, 64)}
	var checks sync.WaitGroup
	checks.Add(5)
	h := r.hooks()
	var n int
	h.Drifted = func(context.Context) (bool, error) {
		if n++; n <= 5 {
			checks.Done()
		}
		return false, nil
	}
	b, err := New(Common{Logger: testr.New(t), MinSyncPeriod: -1, SyncPeriod: 200 * time.Millisecond, DriftCheckInterval: 2 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer runInBackground(b)()
	synced(b)
	waitFor(t, r.syncs, func(req Request) bool { return req.Reason == ReasonInitial })
	checks.Wait() // five checks found nothing...
	// ...and the next sync is the periodic one, partial, with no change.
	waitFor(t, r.syncs, func(req Request) bool { return !req.Full && len(req.Update.ChangedServices) == 0 })
	if s := b.Stats(); s.Syncs > 3 {
		t.Errorf("%d syncs: drift checks that found nothing caused syncs", s.Syncs)
	}
}

func TestRunRepairsDriftAndRequeues(t *testing.T) {
	r := &recorder{syncs: make(chan Request, 16)}
	b := newBase(t, Common{MinSyncPeriod: -1, DriftCheckInterval: 5 * time.Millisecond}, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	synced(b)
	waitFor(t, r.syncs, func(req Request) bool { return req.Reason == ReasonInitial })

	r.mu.Lock()
	r.drifted = true
	r.mu.Unlock()
	waitFor(t, r.syncs, func(req Request) bool { return req.Full && req.Reason == ReasonDrift })

	r.mu.Lock()
	r.result = Result{RequeueAfter: time.Millisecond}
	r.mu.Unlock()
	b.OnServiceAdd(service("a", "10.0.0.1", v1.ProtocolTCP))
	// The sync that sees the service asks for a requeue; the requeued sync
	// comes without any change.
	waitFor(t, r.syncs, func(req Request) bool { return len(req.Update.ChangedServices) == 1 })
	r.mu.Lock()
	r.result = Result{}
	r.mu.Unlock()
	waitFor(t, r.syncs, func(req Request) bool { return len(req.Update.ChangedServices) == 0 })
}

func waitFor(t *testing.T, ch <-chan Request, ok func(Request) bool) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case req := <-ch:
			if ok(req) {
				return
			}
		case <-deadline:
			t.Fatal("the expected sync did not happen")
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Common{}, Hooks{}); err == nil {
		t.Error("New without Apply succeeded")
	}
	apply := func(context.Context, *Request) (Result, error) { return Result{}, nil }
	if _, err := New(Common{IPFamily: "IPv5"}, Hooks{Apply: apply}); err == nil {
		t.Error("New with an unknown family succeeded")
	}
	b, err := New(Common{}, Hooks{Apply: apply})
	if err != nil {
		t.Fatal(err)
	}
	c := b.Config()
	if c.IPFamily != v1.IPv4Protocol || c.SyncPeriod != DefaultSyncPeriod || c.MinSyncPeriod != DefaultMinSyncPeriod ||
		c.FullSyncPeriod != DefaultFullSyncPeriod || c.DriftCheckInterval != DefaultDriftCheckInterval || c.Clock == nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	if _, err := b.DryRun(context.Background()); !errors.Is(err, ErrNoDryRun) {
		t.Errorf("DryRun without the hook = %v, want ErrNoDryRun", err)
	}
	if _, err := (Common{IPFamily: v1.IPv6Protocol}).WithDefaults(v1.IPv4Protocol); err == nil {
		t.Error("a family other than the interfaces' was accepted")
	}
}

// A drift check that finds nothing is not a sync: a change arriving right
// after it is synced at once when MinSyncPeriod has passed since the last
// sync, not MinSyncPeriod after the check. (The loop runs on a fake clock
// that never moves by itself, so a sync gated on a later time never comes.)
func TestDriftCheckDoesNotDelayTheNextSync(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	r := &recorder{syncs: make(chan Request, 16)}
	checked := make(chan struct{}, 16)
	h := r.hooks()
	h.Drifted = func(context.Context) (bool, error) {
		checked <- struct{}{}
		return false, nil
	}
	b, err := New(Common{Logger: testr.New(t), Clock: clk, MinSyncPeriod: time.Second, SyncPeriod: time.Hour,
		DriftCheckInterval: 2 * time.Second}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer runInBackground(b)()
	synced(b)
	waitFor(t, r.syncs, func(req Request) bool { return req.Reason == ReasonInitial })

	// Two seconds on: the drift ticker fires and the loop runs a check only.
	for {
		clk.Step(100 * time.Millisecond)
		select {
		case <-checked:
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	time.Sleep(20 * time.Millisecond) // let the check's loop run end
	b.OnServiceAdd(service("a", "10.0.0.1", v1.ProtocolTCP))
	waitFor(t, r.syncs, func(req Request) bool { return len(req.Update.ChangedServices) == 1 })
}

// A service of the other IP family only is skipped and counted in Stats,
// and stops counting once it gains an IP of this family or goes.
func TestStatsCountOtherFamilyServices(t *testing.T) {
	r := &recorder{}
	b := newBase(t, Common{Clock: clocktesting.NewFakeClock(time.Unix(1e9, 0))}, r)
	ctx := context.Background()
	synced(b)
	v6 := service("v6", "fd00::10", v1.ProtocolTCP)
	b.OnServiceAdd(service("v4", "10.0.0.1", v1.ProtocolTCP))
	b.OnServiceAdd(v6)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.OtherFamily != 1 {
		t.Fatalf("OtherFamily = %d after an IPv6-only service on IPv4, want 1", s.OtherFamily)
	}
	b.OnServiceDelete(v6)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.OtherFamily != 0 {
		t.Fatalf("OtherFamily = %d after the service went, want 0", s.OtherFamily)
	}
}

// Run started before the informers synced tries a sync and finds them not
// synced; that attempt is no run, so the first real sync, triggered by the
// synced handlers, does not wait out MinSyncPeriod behind it (the clock
// here never moves: a wait would be forever).
func TestRunBeforeSyncedDoesNotDelayTheFirstSync(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	r := &recorder{syncs: make(chan Request, 16)}
	b, err := New(Common{Logger: testr.New(t), Clock: clk, MinSyncPeriod: time.Minute, SyncPeriod: time.Hour}, r.hooks())
	if err != nil {
		t.Fatal(err)
	}
	defer runInBackground(b)()
	time.Sleep(100 * time.Millisecond) // Run's first attempt finds nothing synced
	synced(b)
	waitFor(t, r.syncs, func(req Request) bool { return req.Reason == ReasonInitial })
}

// runInBackground starts b.Run and returns what stops it and waits.
func runInBackground(b *Base) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	return func() { cancel(); <-done }
}

// TestRequestUnchanged: a full sync may trust the engine's last write
// (Hooks.Unchanged) only for a reason that casts no doubt on the node; the
// base hands the hook to every sync's Request, and a Request without one
// (a dry run's) never trusts.
func TestRequestUnchanged(t *testing.T) {
	asked := 0
	yes := func(*Request) bool { asked++; return true }
	for reason, want := range map[Reason]bool{
		ReasonInitial: false, ReasonFailure: false, ReasonDrift: false, ReasonDryRun: false,
		ReasonCleanup: false, ReasonNone: false,
		ReasonPeriodic: true, ReasonNode: true, ReasonEngine: true, ReasonRequested: true,
	} {
		asked = 0
		req := &Request{Full: reason != ReasonNone, Reason: reason, unchanged: yes}
		if got := req.Unchanged(); got != want || asked != map[bool]int{false: 0, true: 1}[want] {
			t.Errorf("reason %q: Unchanged() = %v (hook asked %d times), want %v", reason, got, asked, want)
		}
		if (&Request{Full: true, Reason: reason}).Unchanged() {
			t.Errorf("reason %q: Unchanged() without a hook = true", reason)
		}
	}

	r := &recorder{}
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	h := r.hooks()
	var got []bool
	apply := h.Apply
	h.Apply = func(ctx context.Context, req *Request) (Result, error) {
		got = append(got, req.Unchanged())
		return apply(ctx, req)
	}
	h.Unchanged = func(req *Request) bool { return req.Reason == ReasonPeriodic }
	b, err := New(Common{Logger: testr.New(t), Clock: clk, FullSyncPeriod: time.Hour}, h)
	if err != nil {
		t.Fatal(err)
	}
	synced(b)
	mustSync(t, b) // initial
	mustSync(t, b) // partial
	clk.Step(time.Hour)
	mustSync(t, b) // periodic
	b.RequestFullSync()
	mustSync(t, b) // requested: the hook says no
	if want := []bool{false, false, true, false}; !slices.Equal(got, want) {
		t.Fatalf("Request.Unchanged() per sync (initial, partial, periodic, requested) = %v, want %v", got, want)
	}
}
