//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// greeter is a loopback TCP server that writes its name to every client.
func greeter(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go serveGreeting(ln, name)
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// askThrough connects to the proxy listener for node port port (through
// the fake's real address) and returns what the backend said.
func askThrough(t *testing.T, socks *nftablestest.LocalhostSockets, port uint16) (string, error) {
	t.Helper()
	addr, ok := socks.Addr(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port))
	if !ok {
		return "", errors.New("no listener")
	}
	c, err := net.DialTimeout("tcp4", addr.String(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		return string(buf[:n]), nil
	}
	return "", err
}

// proxyFixture: svc-0 (node port 30000, endpoints 10.128.0.1:8080 and
// 10.128.0.2:8080) served by two greeters behind the fake sockets.
type proxyFixture struct {
	fakes *nftablestest.Fakes
	socks *nftablestest.LocalhostSockets
	p     *nftables.Proxier
	c     *cluster
	m     *metrics.Metrics
}

func newProxyFixture(t *testing.T, cfg nftables.Config) *proxyFixture {
	t.Helper()
	f := &proxyFixture{fakes: nftablestest.NewFakes(v1.IPv4Protocol), socks: nftablestest.NewLocalhostSockets(), m: metrics.New()}
	f.socks.SetBackend(netip.MustParseAddrPort("10.128.0.1:8080"), greeter(t, "backend-1"))
	f.socks.SetBackend(netip.MustParseAddrPort("10.128.0.2:8080"), greeter(t, "backend-2"))
	cfg.Metrics = f.m
	ifs := f.fakes.Interfaces()
	ifs.LocalhostSockets = f.socks
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	f.p = p
	f.c = makeCluster(3, 2)
	return f
}

// The proxy serves a TCP node port on loopback with its endpoints, follows
// endpoint changes, and drops the listener when the endpoints are gone or
// the service is deleted; Close closes it.
func TestLocalhostProxyLifecycle(t *testing.T) {
	f := newProxyFixture(t, localhostConfig(true, "127.0.0.0/8", "192.168.50.0/24"))
	f.c.feed(f.p)
	mustSync(t, f.p)
	seen := map[string]bool{}
	for i := 0; i < 40 && len(seen) < 2; i++ {
		got, err := askThrough(t, f.socks, 30000)
		if err != nil {
			t.Fatal(err)
		}
		seen[got] = true
	}
	if !seen["backend-1"] || !seen["backend-2"] || len(seen) != 2 {
		t.Errorf("40 connections reached %v, want both backends", seen)
	}
	if got := testutil.ToFloat64(f.m.NFTablesLocalhostNodePortListeners.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("listeners gauge %v, want 1", got)
	}

	// One endpoint left: every connection goes there.
	old := f.c.slices[0]
	one := old.DeepCopy()
	one.Endpoints = one.Endpoints[1:]
	f.p.OnEndpointSliceUpdate(old, one)
	if out := mustSync(t, f.p); out.Full {
		t.Fatal("want a partial sync")
	}
	for i := 0; i < 5; i++ {
		if got, err := askThrough(t, f.socks, 30000); err != nil || got != "backend-2" {
			t.Fatalf("after the update: %q %v, want backend-2", got, err)
		}
	}

	// No endpoints: no listener (the kernel refuses, as upstream).
	none := one.DeepCopy()
	none.Endpoints = nil
	f.p.OnEndpointSliceUpdate(one, none)
	mustSync(t, f.p)
	if _, err := askThrough(t, f.socks, 30000); err == nil {
		t.Error("a node port without endpoints still has a listener")
	}
	f.p.OnEndpointSliceUpdate(none, one)
	mustSync(t, f.p)
	if got, err := askThrough(t, f.socks, 30000); err != nil || got != "backend-2" {
		t.Fatalf("endpoints back: %q %v", got, err)
	}

	// The service deleted: the listener goes.
	f.p.OnServiceDelete(f.c.services[0])
	mustSync(t, f.p)
	if _, err := askThrough(t, f.socks, 30000); err == nil {
		t.Error("a deleted service's node port still has a listener")
	}
	f.p.OnServiceAdd(f.c.services[0])
	mustSync(t, f.p)
	if _, err := askThrough(t, f.socks, 30000); err != nil {
		t.Fatalf("service back: %v", err)
	}

	f.p.Close()
	if _, err := askThrough(t, f.socks, 30000); err == nil {
		t.Error("Close left the listener open")
	}
	if got := testutil.ToFloat64(f.m.NFTablesLocalhostNodePortListeners.WithLabelValues("IPv4")); got != 0 {
		t.Errorf("listeners gauge %v after Close, want 0", got)
	}
}

// Without the gate, or without a loopback node-port address, nothing
// listens.
func TestLocalhostProxyOnlyWithLoopbackAddress(t *testing.T) {
	for name, cfg := range map[string]nftables.Config{
		"gate off":               localhostConfig(false, "127.0.0.0/8"),
		"no loopback address":    localhostConfig(true, "192.168.50.0/24"),
		"all addresses":          localhostConfig(true, "0.0.0.0/0"),
		"other family loopback":  localhostConfig(true, "::1/128", "192.168.50.0/24"),
		"default (node address)": localhostConfig(true),
	} {
		t.Run(name, func(t *testing.T) {
			f := newProxyFixture(t, cfg)
			f.c.feed(f.p)
			mustSync(t, f.p)
			if n := f.socks.Listens(); n != 0 {
				t.Errorf("%d listeners opened", n)
			}
		})
	}
}

// ClientIP affinity pins every localhost connection to one endpoint (all
// local clients share one address).
func TestLocalhostProxyAffinity(t *testing.T) {
	f := newProxyFixture(t, localhostConfig(true, "127.0.0.1/32"))
	f.c.services[0].Spec.SessionAffinity = v1.ServiceAffinityClientIP
	f.c.services[0].Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
	f.c.feed(f.p)
	mustSync(t, f.p)
	first, err := askThrough(t, f.socks, 30000)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if got, err := askThrough(t, f.socks, 30000); err != nil || got != first {
			t.Fatalf("connection %d: %q %v, want the pinned %q", i, got, err, first)
		}
	}
}

// A listener that cannot be opened is counted and retried by the next
// full sync; Cleanup closes the listeners with the table and the next
// sync opens them again.
func TestLocalhostProxyListenFailureAndCleanup(t *testing.T) {
	f := newProxyFixture(t, localhostConfig(true, "127.0.0.0/8"))
	addr := netip.MustParseAddrPort("127.0.0.1:30000")
	f.socks.FailListen(addr, errors.New("address in use"))
	f.c.feed(f.p)
	mustSync(t, f.p)
	if got := testutil.ToFloat64(f.m.NFTablesLocalhostNodePortListenerCreationFailuresTotal.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("creation failures %v, want 1", got)
	}
	f.socks.FailListen(addr, nil)
	f.p.RequestFullSync()
	mustSync(t, f.p)
	if _, err := askThrough(t, f.socks, 30000); err != nil {
		t.Fatalf("after the retry: %v", err)
	}
	if err := f.p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := askThrough(t, f.socks, 30000); err == nil {
		t.Error("Cleanup left the listener open")
	}
	mustSync(t, f.p)
	if got, err := askThrough(t, f.socks, 30000); err != nil || !strings.HasPrefix(got, "backend-") {
		t.Errorf("after Cleanup and a sync: %q %v", got, err)
	}
}
