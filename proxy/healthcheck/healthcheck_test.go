package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/proxy/metrics"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func get(t *testing.T, h http.Handler, path string) (int, ProxyHealth, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body ProxyHealth
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: missing X-Content-Type-Options", path)
	}
	return rec.Code, body, rec.Body.String()
}

func node(mut func(*v1.Node)) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if mut != nil {
		mut(n)
	}
	return n
}

func TestProxyHealthLifecycle(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	m := metrics.New()
	hs := NewProxyHealthServer(ProxyHealthConfig{HealthTimeout: 10 * time.Second, Clock: clk, Metrics: m, Logger: testr.New(t)})
	h := hs.Handler()

	type want struct{ healthz, livez int }
	check := func(step string, w want) {
		t.Helper()
		if code, _, body := get(t, h, "/healthz"); code != w.healthz {
			t.Errorf("%s: /healthz = %d (%s), want %d", step, code, body, w.healthz)
		}
		if code, _, body := get(t, h, "/livez"); code != w.livez {
			t.Errorf("%s: /livez = %d (%s), want %d", step, code, body, w.livez)
		}
	}

	check("before the first sync", want{503, 503})
	hs.QueuedUpdate(v1.IPv4Protocol)
	check("queued before the first sync", want{503, 503})
	hs.Updated(v1.IPv4Protocol)
	check("synced, node unknown", want{503, 200})
	hs.OnNodeAdd(node(nil))
	check("synced, node known", want{200, 200})

	hs.QueuedUpdate(v1.IPv4Protocol)
	clk.Step(5 * time.Second)
	hs.QueuedUpdate(v1.IPv4Protocol) // does not move the oldest pending time
	clk.Step(4 * time.Second)
	check("change pending for 9s of 10s", want{200, 200})
	clk.Step(time.Second)
	check("change pending for 10s", want{503, 503})
	hs.Updated(v1.IPv4Protocol)
	check("synced again", want{200, 200})
	clk.Step(time.Hour)
	check("nothing pending, long after the last sync", want{200, 200})

	hs.OnNodeUpdate(nil, node(func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{{Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}
	}))
	check("node tainted for deletion", want{503, 200})
	hs.OnNodeUpdate(nil, node(func(n *v1.Node) {
		n.Spec.Taints = []v1.Taint{{Key: "other", Effect: v1.TaintEffectNoSchedule}}
	}))
	check("other taint", want{200, 200})
	now := metav1.NewTime(clk.Now())
	hs.OnNodeUpdate(nil, node(func(n *v1.Node) { n.DeletionTimestamp = &now }))
	check("node being deleted", want{503, 200})
	hs.OnNodeUpdate(nil, node(nil))
	check("node back", want{200, 200})
	hs.OnNodeDelete(node(nil))
	check("node deleted", want{503, 200})

	if got := testutil.ToFloat64(m.ProxyHealthzTotal.WithLabelValues("200")); got != 6 {
		t.Errorf("healthz 200 count = %v, want 6", got)
	}
	if got := testutil.ToFloat64(m.ProxyLivezTotal.WithLabelValues("503")); got != 3 {
		t.Errorf("livez 503 count = %v, want 3", got)
	}
}

func TestProxyHealthBody(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	hs := NewProxyHealthServer(ProxyHealthConfig{HealthTimeout: 10 * time.Second, Clock: clk})
	hs.SyncNode(node(nil))
	hs.Updated(v1.IPv4Protocol)
	hs.Updated(v1.IPv6Protocol)
	clk.Step(3 * time.Second)

	code, body, raw := get(t, hs.Handler(), "/healthz")
	if code != 200 || !body.Healthy || body.NodeEligible == nil || !*body.NodeEligible {
		t.Fatalf("healthy /healthz: %d %s", code, raw)
	}
	// A healthy answer reports the current time as lastUpdated.
	if !body.LastUpdated.Equal(clk.Now()) || !body.CurrentTime.Equal(clk.Now()) {
		t.Errorf("lastUpdated %v currentTime %v, want both %v", body.LastUpdated, body.CurrentTime, clk.Now())
	}
	if !strings.HasPrefix(raw, `{"lastUpdated":"2026-03-01T12:00:03Z","currentTime":"2026-03-01T12:00:03Z","nodeEligible":true,"healthy":true,"status":{`) {
		t.Errorf("body %s does not have kube-proxy's field order", raw)
	}
	if st := body.Status[v1.IPv6Protocol]; !st.Healthy || !st.LastUpdated.Equal(t0) {
		t.Errorf("IPv6 status %+v", st)
	}

	// IPv6 falls behind: unhealthy, with the real last sync time.
	hs.QueuedUpdate(v1.IPv6Protocol)
	hs.Updated(v1.IPv4Protocol)
	clk.Step(10 * time.Second)
	code, body, raw = get(t, hs.Handler(), "/livez")
	if code != 503 || body.Healthy {
		t.Fatalf("/livez with IPv6 behind: %d %s", code, raw)
	}
	if body.NodeEligible != nil {
		t.Errorf("/livez reports nodeEligible: %s", raw)
	}
	if st := body.Status[v1.IPv6Protocol]; st.Healthy {
		t.Errorf("IPv6 reported healthy: %s", raw)
	}
	if st := body.Status[v1.IPv4Protocol]; !st.Healthy {
		t.Errorf("IPv4 reported unhealthy: %s", raw)
	}
	if want := t0.Add(3 * time.Second); !body.LastUpdated.Equal(want) {
		t.Errorf("unhealthy lastUpdated = %v, want the last sync %v", body.LastUpdated, want)
	}
}

func TestProxyHealthFamilyNeverSynced(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	hs := NewProxyHealthServer(ProxyHealthConfig{HealthTimeout: time.Minute, Clock: clk, AssumeNodeEligible: true})
	hs.Updated(v1.IPv4Protocol)
	hs.QueuedUpdate(v1.IPv6Protocol)
	if !hs.IsHealthy() {
		t.Fatal("unhealthy before the timeout")
	}
	clk.Step(time.Minute)
	if hs.IsHealthy() {
		t.Fatal("a family that never synced a queued change for a minute is healthy")
	}
}

func TestAssumeNodeEligible(t *testing.T) {
	hs := NewProxyHealthServer(ProxyHealthConfig{AssumeNodeEligible: true})
	hs.Updated(v1.IPv4Protocol)
	if code, _, raw := get(t, hs.Handler(), "/healthz"); code != 200 {
		t.Errorf("unknown node with AssumeNodeEligible: %d %s", code, raw)
	}
	hs.OnNodeDelete(node(nil))
	if code, _, raw := get(t, hs.Handler(), "/healthz"); code != 503 {
		t.Errorf("deleted node with AssumeNodeEligible: %d %s", code, raw)
	}
}

// loopbackListener binds 127.0.0.1 ephemeral ports whatever address is
// asked for, records what was asked, and fails the ports it is told to.
type loopbackListener struct {
	mu        sync.Mutex
	requested []string
	fail      map[string]bool // requested address → fail
}

func (l *loopbackListener) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l.mu.Lock()
	l.requested = append(l.requested, addr)
	fail := l.fail[addr]
	l.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("listen tcp %s: bind: address already in use", addr)
	}
	var lc net.ListenConfig
	return lc.Listen(ctx, "tcp", "127.0.0.1:0")
}

func (l *loopbackListener) setFail(addr string, fail bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail == nil {
		l.fail = map[string]bool{}
	}
	l.fail[addr] = fail
}

func TestProxyHealthRun(t *testing.T) {
	ll := &loopbackListener{}
	hs := NewProxyHealthServer(ProxyHealthConfig{Addr: "0.0.0.0:10256", Listener: ll, AssumeNodeEligible: true})
	hs.Updated(v1.IPv4Protocol)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)

	lnCh := make(chan net.Listener, 1)
	go func() {
		ln, err := ll.Listen(ctx, "probe")
		if err != nil {
			done <- err
			return
		}
		lnCh <- ln
		done <- hs.Serve(ctx, ln)
	}()
	ln := <-lnCh
	resp, err := http.Get("http://" + ln.Addr().String() + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/livez over HTTP = %d", resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}

	// Run reports a listen failure with the address.
	ll.setFail("0.0.0.0:10256", true)
	err = hs.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "0.0.0.0:10256") {
		t.Errorf("Run with a busy port = %v", err)
	}
}

var (
	svcA = types.NamespacedName{Namespace: "ns", Name: "a"}
	svcB = types.NamespacedName{Namespace: "ns", Name: "b"}
	svcC = types.NamespacedName{Namespace: "other", Name: "c"}
)

type probe struct {
	code   int
	body   string
	weight string
}

func probeService(t *testing.T, s *ServiceHealthServer, name types.NamespacedName) probe {
	t.Helper()
	addrs := s.Addrs(name)
	if len(addrs) == 0 {
		t.Fatalf("service %s has no health-check port open", name)
	}
	resp, err := http.Get("http://" + addrs[0].String() + "/")
	if err != nil {
		t.Fatalf("probe %s: %v", name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return probe{resp.StatusCode, string(b), resp.Header.Get("X-Load-Balancing-Endpoint-Weight")}
}

type fakeProxyHealth struct{ healthy atomic.Bool }

func (f *fakeProxyHealth) IsHealthy() bool { return f.healthy.Load() }

func TestServiceHealth(t *testing.T) {
	ll := &loopbackListener{}
	ph := &fakeProxyHealth{}
	ph.healthy.Store(true)
	m := metrics.New()
	s := NewServiceHealthServer(ServiceHealthConfig{NodeName: "node-a", Listener: ll, ProxyHealth: ph, Metrics: m, Logger: testr.New(t)})
	defer s.Close()

	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002}); err != nil {
		t.Fatal(err)
	}
	p := probeService(t, s, svcA)
	if p.code != 503 || p.weight != "0" {
		t.Errorf("no endpoints: %+v", p)
	}

	if err := s.SyncEndpoints(map[types.NamespacedName]int{svcA: 2, svcC: 5}); err != nil {
		t.Fatal(err)
	}
	p = probeService(t, s, svcA)
	wantBody := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"a\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
	if p.code != 200 || p.body != wantBody || p.weight != "2" {
		t.Errorf("two endpoints: %d weight %s body\n%s\nwant\n%s", p.code, p.weight, p.body, wantBody)
	}
	if p := probeService(t, s, svcB); p.code != 503 {
		t.Errorf("service b without endpoints: %+v", p)
	}

	// The proxy going unhealthy fails every service.
	ph.healthy.Store(false)
	p = probeService(t, s, svcA)
	if p.code != 503 || !strings.Contains(p.body, `"serviceProxyHealthy": false`) {
		t.Errorf("proxy unhealthy: %+v", p)
	}
	ph.healthy.Store(true)

	// Endpoint counts given before the port opens apply once it does.
	ll.setFail(":30003", true)
	err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002, svcC: 30003})
	var le *ListenError
	if !errors.As(err, &le) || le.Service != svcC || le.Port != 30003 {
		t.Fatalf("busy port: error %v, want a ListenError for %s", err, svcC)
	}
	if !strings.Contains(err.Error(), "other/c") || !strings.Contains(err.Error(), ":30003") {
		t.Errorf("error %q does not name the service and address", err)
	}
	if got := testutil.ToFloat64(m.ServiceHealthCheckListenFailuresTotal); got != 1 {
		t.Errorf("listen failures = %v, want 1", got)
	}
	if s.Addrs(svcC) != nil {
		t.Error("failed service has addresses")
	}
	if p := probeService(t, s, svcA); p.code != 200 {
		t.Errorf("service a broken by c's failure: %+v", p)
	}
	ll.setFail(":30003", false)
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002, svcC: 30003}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if p := probeService(t, s, svcC); p.code != 200 || !strings.Contains(p.body, `"localEndpoints": 5`) {
		t.Errorf("service c after retry: %+v", p)
	}

	// Unchanged services keep their listener; a changed port reopens;
	// removed services close.
	oldA, oldB := s.Addrs(svcA)[0].String(), s.Addrs(svcB)[0].String()
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 31002}); err != nil {
		t.Fatal(err)
	}
	if got := s.Addrs(svcA)[0].String(); got != oldA {
		t.Errorf("unchanged service reopened: %s -> %s", oldA, got)
	}
	if got := s.Addrs(svcB)[0].String(); got == oldB {
		t.Error("service with a new port kept its old listener")
	}
	if s.Addrs(svcC) != nil {
		t.Error("removed service still open")
	}
	if _, err := http.Get("http://" + oldB + "/"); err == nil {
		t.Error("old port of service b still answers")
	}

	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 0}); err == nil {
		t.Error("port 0 accepted")
	}

	s.Close()
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001}); err == nil {
		t.Error("SyncServices after Close succeeded")
	}
}

func TestServiceHealthNodeIPs(t *testing.T) {
	ll := &loopbackListener{}
	s := NewServiceHealthServer(ServiceHealthConfig{
		Listener: ll,
		NodeIPs:  []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")},
	})
	defer s.Close()
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001}); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ll.requested, " "), "10.0.0.1:30001 [fd00::1]:30001"; got != want {
		t.Errorf("listened on %q, want %q", got, want)
	}
	if n := len(s.Addrs(svcA)); n != 2 {
		t.Errorf("%d listeners, want 2", n)
	}

	// One address failing closes the other: all or nothing per service.
	ll.setFail("[fd00::1]:30002", true)
	err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002})
	var le *ListenError
	if !errors.As(err, &le) || le.Addr != "[fd00::1]:30002" {
		t.Fatalf("error %v", err)
	}
	if s.Addrs(svcB) != nil {
		t.Error("half-open service")
	}
}

func TestServiceHealthDefaultsHealthy(t *testing.T) {
	s := NewServiceHealthServer(ServiceHealthConfig{Listener: &loopbackListener{}})
	defer s.Close()
	if err := s.SyncEndpoints(map[types.NamespacedName]int{svcA: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001}); err != nil {
		t.Fatal(err)
	}
	if p := probeService(t, s, svcA); p.code != 200 || !strings.Contains(p.body, `"serviceProxyHealthy": true`) {
		t.Errorf("%+v", p)
	}
}

func TestServiceHealthWithProxyHealthServer(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	hs := NewProxyHealthServer(ProxyHealthConfig{Clock: clk})
	s := NewServiceHealthServer(ServiceHealthConfig{Listener: &loopbackListener{}, ProxyHealth: hs})
	defer s.Close()
	_ = s.SyncServices(map[types.NamespacedName]uint16{svcA: 30001})
	_ = s.SyncEndpoints(map[types.NamespacedName]int{svcA: 1})
	if p := probeService(t, s, svcA); p.code != 503 {
		t.Errorf("before the first sync: %+v", p)
	}
	hs.Updated(v1.IPv4Protocol)
	if p := probeService(t, s, svcA); p.code != 200 {
		t.Errorf("after the first sync: %+v", p)
	}
}

func TestStdListenerAndPortReuse(t *testing.T) {
	// Find a free loopback port, then hand it from one service to another
	// within one SyncServices: the old listener must be gone at once.
	probe, err := StdListener{}.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(probe.Addr().(*net.TCPAddr).Port)
	probe.Close()

	s := NewServiceHealthServer(ServiceHealthConfig{NodeIPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}})
	defer s.Close()
	if err := s.SyncServices(map[types.NamespacedName]uint16{svcA: port}); err != nil {
		t.Skipf("loopback port %d taken meanwhile: %v", port, err)
	}
	for i := range 20 {
		from, to := svcA, svcB
		if i%2 == 1 {
			from, to = svcB, svcA
		}
		if err := s.SyncServices(map[types.NamespacedName]uint16{to: port}); err != nil {
			t.Fatalf("moving port %d from %s to %s: %v", port, from, to, err)
		}
	}
	_ = s.SyncEndpoints(map[types.NamespacedName]int{svcA: 1})
	if p := probeService(t, s, svcA); p.code != 200 {
		t.Errorf("%+v", p)
	}
}

func TestServiceHealthFamilyViews(t *testing.T) {
	ll := &loopbackListener{}
	s := NewServiceHealthServer(ServiceHealthConfig{Listener: ll})
	defer s.Close()
	v4, v6 := s.Family(v1.IPv4Protocol), s.Family(v1.IPv6Protocol)

	// Both engines report the same dual-stack service: one port, opened once.
	if err := v4.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcB: 30002}); err != nil {
		t.Fatal(err)
	}
	if err := v6.SyncServices(map[types.NamespacedName]uint16{svcA: 30001, svcC: 30003}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ll.requested, " "); got != ":30001 :30002 :30003" {
		t.Errorf("listened on %q", got)
	}
	// One family's endpoints do not wipe the other's.
	_ = v4.SyncEndpoints(map[types.NamespacedName]int{svcA: 2, svcB: 1})
	_ = v6.SyncEndpoints(map[types.NamespacedName]int{svcA: 2, svcC: 4})
	for name, want := range map[types.NamespacedName]string{svcA: "2", svcB: "1", svcC: "4"} {
		if p := probeService(t, s, name); p.code != 200 || p.weight != want {
			t.Errorf("%s: %+v, want 200 with weight %s", name, p, want)
		}
	}
	// A service leaves only when no family has it.
	if err := v4.SyncServices(map[types.NamespacedName]uint16{svcB: 30002}); err != nil {
		t.Fatal(err)
	}
	if s.Addrs(svcA) == nil {
		t.Error("service a closed while IPv6 still has it")
	}
	if err := v6.SyncServices(map[types.NamespacedName]uint16{svcC: 30003}); err != nil {
		t.Fatal(err)
	}
	if s.Addrs(svcA) != nil {
		t.Error("service a still open after both families dropped it")
	}
	_ = v4.SyncEndpoints(nil)
	if p := probeService(t, s, svcB); p.code != 503 {
		t.Errorf("service b after IPv4 lost its endpoints: %+v", p)
	}
	if p := probeService(t, s, svcC); p.code != 200 {
		t.Errorf("service c lost IPv6 endpoints to an IPv4 sync: %+v", p)
	}
}

// /healthz on a node that is not eligible (being deleted, or tainted for
// removal) answers 503 with "healthy": false, though the proxy itself is
// in sync (its per-family status stays healthy); /livez still answers 200.
func TestHealthzBodyAgreesWithNodeEligibility(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	hs := NewProxyHealthServer(ProxyHealthConfig{Clock: clk})
	hs.Updated(v1.IPv4Protocol)
	for _, n := range []*v1.Node{
		nil, // not heard of yet
		{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &metav1.Time{Time: t0}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: ToBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}}},
	} {
		if n != nil {
			hs.SyncNode(n)
		}
		code, body, raw := get(t, hs.Handler(), "/healthz")
		if code != 503 || body.Healthy || body.NodeEligible == nil || *body.NodeEligible {
			t.Errorf("/healthz on an ineligible node: %d %s, want 503 with healthy and nodeEligible false", code, raw)
		}
		if st := body.Status[v1.IPv4Protocol]; !st.Healthy {
			t.Errorf("IPv4 status %s, want the proxy's own health (healthy)", raw)
		}
		if !body.LastUpdated.Equal(t0) {
			t.Errorf("lastUpdated = %v, want the last sync %v (not now: the answer is 503)", body.LastUpdated, t0)
		}
		if code, body, raw := get(t, hs.Handler(), "/livez"); code != 200 || !body.Healthy {
			t.Errorf("/livez: %d %s, want 200 healthy", code, raw)
		}
	}
}
