package userspace

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
)

// hangingSockets dials every endpoint in hang by waiting for the dial
// context to end (an endpoint that never answers), and counts dials.
type hangingSockets struct {
	OSSockets
	hang  netip.Addr
	dials atomic.Int32
}

func (s *hangingSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	s.dials.Add(1)
	if addr.Addr() == s.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.OSSockets.DialTCP(ctx, addr)
}

func TestDialTimeoutMovesToTheNextEndpoint(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	startBackend(t, "127.0.0.2", port)
	socks := &hangingSockets{hang: netip.MustParseAddr("127.0.0.8")}
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		TCPDialTimeout: 20 * time.Millisecond, RetryBackoff: -1}, Interfaces{Sockets: socks})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.8"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	for i := range 4 {
		ans, err := askTCP(addr, "x")
		if err != nil || backendOf(ans) != "127.0.0.2" {
			t.Fatalf("ask %d: %q %v", i, ans, err)
		}
	}
	// A failed dial moves the rotation on, so once the hanging endpoint
	// came up every later connection tries it first, times out, and gets
	// the other one: 3 or 4 timeouts, depending on the shuffled start.
	errs := Counters(p)[CounterDialErrors]
	if (errs != 3 && errs != 4) || int64(socks.dials.Load()) != 4+errs {
		t.Errorf("dial_errors=%d dials=%d, want 3 or 4 timeouts and one more dial each", errs, socks.dials.Load())
	}
}

// failingListen refuses to bind one port, as if another process held it.
type failingListen struct {
	OSSockets
	taken uint16
}

func (s failingListen) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	if addr.Port() == s.taken {
		return nil, &net.OpError{Op: "listen", Net: "tcp", Err: errAddrInUse}
	}
	return s.OSSockets.ListenTCP(addr)
}

type addrInUse struct{}

func (addrInUse) Error() string { return "address already in use" }

var errAddrInUse = addrInUse{}

func TestPortRangeSkipsPortsHeldElsewhere(t *testing.T) {
	base := freePort(t)
	// The range holds base and base+1; base is "held by another process".
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		PortRange: PortRange{Begin: base, End: base + 1}}, Interfaces{Sockets: failingListen{taken: uint16(base)}})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	err := p.Sync(context.Background())
	if addr, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false); ok {
		if int(addr.Port()) != base+1 {
			t.Fatalf("proxy port %d, want %d", addr.Port(), base+1)
		}
		if err != nil {
			t.Fatalf("Sync: %v", err)
		}
		return
	}
	// base+1 may itself be taken on a busy machine; then the error must say so.
	t.Logf("port %d unavailable too: %v", base+1, err)
}

func TestRunSyncsOnChange(t *testing.T) {
	p, err := NewProxier(Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		Common: engine.Common{NodeName: testNode, MinSyncPeriod: time.Millisecond}}, Interfaces{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	eventually(t, "Run to open the service's socket", func() bool {
		_, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
		return ok
	})
	p.OnServiceDelete(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	eventually(t, "Run to close it", func() bool {
		_, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
		return !ok
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
