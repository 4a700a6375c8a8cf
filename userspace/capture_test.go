package userspace_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

func nodePortService() *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeNodePort, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			ExternalIPs: []string{"198.51.100.1"},
			Ports:       []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func webSlice(ips ...string) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{ip}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("node-a")})
	}
	return sl
}

var portRE = regexp.MustCompile(`(--to-ports |--to-destination [0-9.]+:|--dport )(\d{4,5})\b`)

// normalizePorts replaces proxy port numbers (kernel-chosen) by their
// order of appearance, so the golden text is stable.
func normalizePorts(s string, keep ...string) string {
	seen := map[string]string{}
	return portRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		for _, k := range keep {
			if sub[2] == k {
				return m
			}
		}
		if _, ok := seen[sub[2]]; !ok {
			seen[sub[2]] = fmt.Sprintf("P%d", len(seen)+1)
		}
		return sub[1] + seen[sub[2]]
	})
}

func newCaptureProxier(t *testing.T, fake *xtablestest.Fake) *userspace.Proxier {
	t.Helper()
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a"}, HostIP: netip.MustParseAddr("192.168.50.10"),
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}, userspace.Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestCaptureRulesGolden(t *testing.T) {
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	p := newCaptureProxier(t, fake)
	ctx := context.Background()
	p.OnServiceAdd(nodePortService())
	p.OnEndpointSliceAdd(webSlice("10.244.1.2", "10.244.2.2"))
	if err := p.Sync(ctx); !errors.Is(err, proxy.ErrNotSynced) {
		t.Fatalf("Sync before synced = %v", err)
	}
	if fake.Stats().Restores != 0 {
		t.Fatal("rules written before the initial lists were synced")
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := normalizePorts(fake.Dump(), "80", "30080")
	want := `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-NODEPORT-CONTAINER - [0:0]
:KUBE-NODEPORT-HOST - [0:0]
:KUBE-PORTALS-CONTAINER - [0:0]
:KUBE-PORTALS-HOST - [0:0]
-A PREROUTING -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-CONTAINER
-A PREROUTING -m addrtype --dst-type LOCAL -m comment --comment "handle service NodePorts; NOTE: this must be the last rule in the chain" -j KUBE-NODEPORT-CONTAINER
-A OUTPUT -m comment --comment "handle ClusterIPs; NOTE: this must be before the NodePort rules" -j KUBE-PORTALS-HOST
-A OUTPUT -m addrtype --dst-type LOCAL -m comment --comment "handle service NodePorts; NOTE: this must be the last rule in the chain" -j KUBE-NODEPORT-HOST
-A KUBE-NODEPORT-CONTAINER -p tcp -m comment --comment "ns/web:http" -m tcp --dport 30080 -j REDIRECT --to-ports P1
-A KUBE-NODEPORT-HOST -p tcp -m comment --comment "ns/web:http" -m tcp --dport 30080 -j DNAT --to-destination 192.168.50.10:P1
-A KUBE-PORTALS-CONTAINER -m comment --comment "userspace proxy canary"
-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http" -m tcp --dport 80 -j REDIRECT --to-ports P1
-A KUBE-PORTALS-CONTAINER -d 198.51.100.1/32 -p tcp -m comment --comment "ns/web:http" -m tcp --dport 80 -j REDIRECT --to-ports P1
-A KUBE-PORTALS-HOST -d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http" -m tcp --dport 80 -j DNAT --to-destination 192.168.50.10:P1
-A KUBE-PORTALS-HOST -d 198.51.100.1/32 -p tcp -m comment --comment "ns/web:http" -m tcp --dport 80 -j DNAT --to-destination 192.168.50.10:P1
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-NODEPORT-NON-LOCAL - [0:0]
:KUBE-USERSPACE-FILTER - [0:0]
-A INPUT -m comment --comment "userspace proxy: no endpoints, source ranges" -j KUBE-USERSPACE-FILTER
-A INPUT -m comment --comment "Ensure that non-local NodePort traffic can flow" -j KUBE-NODEPORT-NON-LOCAL
-A FORWARD -m comment --comment "userspace proxy: no endpoints, source ranges" -j KUBE-USERSPACE-FILTER
-A KUBE-NODEPORT-NON-LOCAL -p tcp -m comment --comment "ns/web:http" -m conntrack --ctstate NEW -m tcp --dport P1 -j ACCEPT
-A KUBE-USERSPACE-FILTER -m comment --comment "userspace proxy canary"
COMMIT
`
	if got != want {
		t.Fatalf("rules:\n%s\nwant:\n%s", got, want)
	}

	// An unchanged sync writes nothing.
	fake.ResetStats()
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := fake.Stats().Restores; n != 0 {
		t.Fatalf("unchanged sync ran %d restores", n)
	}

	// No endpoints: new connections to the proxy port are rejected.
	p.OnEndpointSliceUpdate(nil, webSlice())
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(normalizePorts(fake.Dump(), "30080"), "-A KUBE-USERSPACE-FILTER -p tcp -m comment --comment \"ns/web:http\" -m addrtype --dst-type LOCAL -m conntrack --ctstate NEW -m tcp --dport P1 -j REJECT --reject-with icmp-port-unreachable") {
		t.Fatalf("no REJECT rule for a service without endpoints:\n%s", fake.Dump())
	}
	tr := &userspacetest.Tracer{Proxier: p, IPTables: fake, NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.50.10")}}
	res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP})
	if err != nil || res.Verdict != proxytest.Rejected {
		t.Fatalf("trace = %v, %v; want rejected", res, err)
	}

	// Cleanup removes every chain and jump.
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		chains, _ := fake.Chains(table)
		for _, c := range chains {
			if strings.HasPrefix(string(c), "KUBE-") {
				t.Errorf("chain %s/%s left after Cleanup", table, c)
			}
		}
	}
	if d := fake.Dump(); strings.Contains(d, "KUBE-") {
		t.Errorf("rules left after Cleanup:\n%s", d)
	}
	// Cleanup with nothing installed is fine.
	if err := userspace.CleanupLeftovers(ctx, fake); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
}

func TestCaptureRestoreFailureIsRetriedInFull(t *testing.T) {
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	p := newCaptureProxier(t, fake)
	ctx := context.Background()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(nodePortService())
	p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
	boom := errors.New("xtables lock held")
	fake.FailNextRestore(boom)
	if err := p.Sync(ctx); !errors.Is(err, boom) {
		t.Fatalf("Sync = %v, want the restore error", err)
	}
	// The sockets are open and the next sync writes the rules.
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fake.Dump(), "-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32") {
		t.Fatalf("rules not written after a failed restore:\n%s", fake.Dump())
	}
	if st := p.Stats(); st.Failures != 1 || st.FullSyncs != 1 || !st.Last.Full {
		t.Errorf("stats = %+v, want 1 failure, then a full sync", st)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	fake6 := xtablestest.NewFake(v1.IPv6Protocol)
	fake4 := xtablestest.NewFake(v1.IPv4Protocol)
	for name, c := range map[string]struct {
		cfg userspace.Config
		ifs userspace.Interfaces
	}{
		"no runner":          {},
		"runner family":      {userspace.Config{Common: engine.Common{IPFamily: v1.IPv4Protocol}}, userspace.Interfaces{IPTables: fake6}},
		"listen family":      {userspace.Config{Capture: userspace.CaptureNone, ListenAddress: netip.MustParseAddr("::1")}, userspace.Interfaces{}},
		"loopback + capture": {userspace.Config{ListenAddress: netip.MustParseAddr("127.0.0.1")}, userspace.Interfaces{IPTables: fake4}},
		"bad range":          {userspace.Config{Capture: userspace.CaptureNone, PortRange: userspace.PortRange{Begin: 10, End: 5}}, userspace.Interfaces{}},
		"bad family":         {userspace.Config{Capture: userspace.CaptureNone, Common: engine.Common{IPFamily: "IPv5"}}, userspace.Interfaces{}},
		"bad capture":        {userspace.Config{Capture: userspace.CaptureMode(7)}, userspace.Interfaces{}},
	} {
		if _, err := userspace.NewProxier(c.cfg, c.ifs); !errors.Is(err, userspace.ErrInvalidConfig) {
			t.Errorf("%s: NewProxier = %v, want ErrInvalidConfig", name, err)
		}
	}
	for in, want := range map[string]userspace.PortRange{"": {}, "30000-30010": {Begin: 30000, End: 30010}, "4000": {Begin: 4000, End: 4000}} {
		got, err := userspace.ParsePortRange(in)
		if err != nil || got != want {
			t.Errorf("ParsePortRange(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"a-b", "5-1", "0-10", "1-70000"} {
		if _, err := userspace.ParsePortRange(in); !errors.Is(err, userspace.ErrInvalidConfig) {
			t.Errorf("ParsePortRange(%q) = %v, want ErrInvalidConfig", in, err)
		}
	}
}

type recordingCleaner struct{ calls [][]conntrack.Filter }

func (r *recordingCleaner) DeleteUDP(ipv6 bool, filters []conntrack.Filter) (uint, error) {
	r.calls = append(r.calls, append([]conntrack.Filter(nil), filters...))
	return uint(len(filters)), nil
}

func TestUDPConntrackCleaning(t *testing.T) {
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	ct := &recordingCleaner{}
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", Conntrack: ct}, HostIP: netip.MustParseAddr("192.168.50.10")},
		userspace.Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	svc := nodePortService()
	svc.Spec.ExternalIPs = nil
	svc.Spec.Ports[0].Protocol = v1.ProtocolUDP
	slice := func(ips ...string) *discovery.EndpointSlice {
		sl := webSlice(ips...)
		sl.Ports[0].Protocol = ptr.To(v1.ProtocolUDP)
		return sl
	}
	// The engine's own filters: flows to the service's capture rules.
	// The base adds kube-proxy's stale-UDP filters (an endpoint gone: its
	// reply source; a cluster IP gone) in the same call.
	want := []conntrack.Filter{
		{OrigDst: netip.MustParseAddr("10.96.0.10"), OrigDstPort: 80}, {OrigDstPort: 30080},
	}
	step := func(name string, wantCleaned bool) {
		t.Helper()
		ct.calls = nil
		if err := p.Sync(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []conntrack.Filter
		for _, call := range ct.calls {
			got = append(got, call...)
		}
		missing := slices.ContainsFunc(want, func(f conntrack.Filter) bool { return !slices.Contains(got, f) })
		ours := slices.ContainsFunc(got, func(f conntrack.Filter) bool { return slices.Contains(want, f) })
		switch {
		case wantCleaned && (len(ct.calls) != 1 || missing):
			t.Errorf("%s: cleaned %v, want one call with %v", name, ct.calls, want)
		case !wantCleaned && ours:
			t.Errorf("%s: cleaned %v, want none of %v", name, ct.calls, want)
		}
	}
	p.OnServiceAdd(svc)
	p.OnEndpointSliceAdd(slice("10.244.1.2"))
	step("created", true)
	p.OnEndpointSliceUpdate(nil, slice("10.244.1.3"))
	step("endpoint replaced (same rules)", false)
	p.OnEndpointSliceUpdate(nil, slice())
	step("endpoints gone (reject rule)", true)
	p.OnEndpointSliceUpdate(nil, slice("10.244.1.2"))
	step("endpoint back", true)
	p.OnServiceDelete(svc)
	step("deleted", true)
}

func TestMetrics(t *testing.T) {
	m := metrics.New()
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", Metrics: m}, HostIP: netip.MustParseAddr("192.168.50.10")},
		userspace.Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	svc := nodePortService()
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	p.OnServiceAdd(svc)
	p.OnEndpointSliceAdd(webSlice()) // no endpoints at all
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(m.SyncProxyRulesLastTimestamp.WithLabelValues("IPv4")); v == 0 {
		t.Error("last sync timestamp not set")
	}
	if v := testutil.ToFloat64(m.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues("external", "IPv4")); v != 1 {
		t.Errorf("no_local_endpoints{external} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.IPTablesRulesTotal.WithLabelValues("nat", "IPv4")); v != 6 {
		t.Errorf("iptables nat rules = %v, want 6", v)
	}
	fake.FailNextRestore(errors.New("boom"))
	p.OnServiceDelete(svc)
	if err := p.Sync(context.Background()); err == nil {
		t.Fatal("Sync succeeded with a failing restore")
	}
	if v := testutil.ToFloat64(m.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4")); v != 1 {
		t.Errorf("restore failures = %v, want 1", v)
	}
}

func TestCaptureRulesRepairedByPeriodicFullWrite(t *testing.T) {
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	clk := clocktesting.NewFakeClock(time.Now())
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", Clock: clk}, HostIP: netip.MustParseAddr("192.168.50.10")},
		userspace.Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(nodePortService())
	p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Someone flushes our chain.
	if err := fake.FlushChain(ctx, xtables.TableNAT, userspace.ChainPortalsContainer); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(fake.Dump(), "-A KUBE-PORTALS-CONTAINER") {
		t.Fatal("rules came back without a reason to rewrite")
	}
	clk.Step(time.Hour)
	if err := p.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fake.Dump(), "-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32") {
		t.Fatalf("periodic full write did not repair the chain:\n%s", fake.Dump())
	}
}
