package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/proxy/engine"
)

func backendOf(answer string) string {
	ip, _, _ := strings.Cut(answer, ":")
	return ip
}

func TestTCPRoundRobinNoCapture(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		startBackend(t, ip, port)
	}
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.3"}, epSpec{ip: "127.0.0.4"}))
	mustSync(t, p)

	addr, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	if !ok || addr.Addr() != netip.MustParseAddr("127.0.0.1") || addr.Port() == 0 {
		t.Fatalf("ProxyAddr = %v, %v", addr, ok)
	}
	counts := map[string]int{}
	for i := range 9 {
		ans, err := askTCP(addr, fmt.Sprint("hello", i))
		if err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
		if want := fmt.Sprint(":hello", i); !strings.HasSuffix(ans, want) {
			t.Fatalf("answer %q, want suffix %q", ans, want)
		}
		counts[backendOf(ans)]++
	}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		if counts[ip] != 3 {
			t.Errorf("backend %s got %d of 9 connections, want 3 (%v)", ip, counts[ip], counts)
		}
	}
	if st := Counters(p); st[CounterTCPProxied] != 9 {
		t.Errorf("tcp_proxied = %d, want 9", st[CounterTCPProxied])
	}

	// Removing the service closes its socket.
	p.OnServiceDelete(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	mustSync(t, p)
	if _, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false); ok {
		t.Fatal("socket still listed after the service was deleted")
	}
	if _, err := askTCP(addr, "x"); err == nil {
		t.Fatal("the deleted service's socket still answers")
	}
}

func TestTCPRefusingBackendIsSkipped(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.9")
	startBackend(t, "127.0.0.2", port)
	// 127.0.0.9 has no listener: every dial to it is refused.
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), RetryBackoff: -1})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.9"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	for i := range 6 {
		ans, err := askTCP(addr, "hi")
		if err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
		if backendOf(ans) != "127.0.0.2" {
			t.Fatalf("answer %q from an unexpected backend", ans)
		}
	}
	st := Counters(p)
	if st[CounterDialErrors] == 0 {
		t.Error("dial_errors = 0: the refusing backend was never tried")
	}
	if st[CounterDialFailures] != 0 {
		t.Errorf("dial_failures = %d, want 0", st[CounterDialFailures])
	}
}

func TestTCPAllBackendsRefuse(t *testing.T) {
	port := freePort(t, "127.0.0.9")
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), MaxRetries: 2, RetryBackoff: time.Millisecond})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.9"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	if ans, err := askTCP(addr, "hi"); err == nil {
		t.Fatalf("got answer %q with every backend refusing", ans)
	}
	st := Counters(p)
	if st[CounterDialErrors] != 3 || st[CounterDialFailures] != 1 {
		t.Errorf("dial_errors=%d dial_failures=%d, want 3 and 1", st[CounterDialErrors], st[CounterDialFailures])
	}
}

func TestTCPNoEndpointsResets(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	mustSync(t, p)
	addr, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	if !ok {
		t.Fatal("a service without endpoints has no socket")
	}
	_, err := askTCP(addr, "hi")
	if err == nil {
		t.Fatal("got an answer with no endpoints")
	}
	if st := Counters(p); st[CounterNoEndpoints] != 1 {
		t.Errorf("no_endpoints = %d, want 1", st[CounterNoEndpoints])
	}
}

func TestTCPBackendDiesMidStream(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	b := startBackend(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)

	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	io.WriteString(c, "one\n")
	if line, err := r.ReadString('\n'); err != nil || line != "127.0.0.2:one\n" {
		t.Fatalf("first answer %q, %v", line, err)
	}
	b.resetAll()
	// The proxy must close the client side: the read ends (EOF or reset),
	// it does not hang until the deadline.
	_, err = r.ReadString('\n')
	if err == nil {
		t.Fatal("read after the backend died returned data")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("client connection not closed after the backend died: %v", err)
	}
	// The break is passed on as a reset, not as a clean end of stream.
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client read error %v, want a connection reset", err)
	}
	eventually(t, "proxied connection to be released", func() bool {
		p.conns.mu.Lock()
		defer p.conns.mu.Unlock()
		return len(p.conns.active) == 0
	})
}

func TestTCPHalfClose(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	startBackend(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)

	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Send everything, then half-close: the backend sees EOF after the
	// data, answers, and closes; we read the whole answer then EOF.
	io.WriteString(c, "a\nb\n")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if string(got) != "127.0.0.2:a\n127.0.0.2:b\n" {
		t.Fatalf("got %q", got)
	}
}

func TestUDPFlowsAndIdleTimeout(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	startBackend(t, "127.0.0.2", port)
	startBackend(t, "127.0.0.3", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), UDPIdleTimeout: 50 * time.Millisecond})
	p.OnServiceAdd(makeService("dns", "10.96.0.10", v1.ProtocolUDP, 53))
	p.OnEndpointSliceAdd(makeSlice("dns", v1.ProtocolUDP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.3"}))
	mustSync(t, p)
	name := spn("dns", v1.ProtocolUDP)
	addr, ok := ProxyAddr(p, name, false)
	if !ok {
		t.Fatal("no UDP socket")
	}

	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	clientAddr := addrPortOf(client.LocalAddr())
	ans, err := askUDP(client, addr, "q1")
	if err != nil {
		t.Fatal(err)
	}
	first := backendOf(ans)
	// The same client keeps its flow, hence its backend.
	for range 3 {
		ans, err := askUDP(client, addr, "q")
		if err != nil {
			t.Fatal(err)
		}
		if backendOf(ans) != first {
			t.Fatalf("flow moved from %s to %s", first, backendOf(ans))
		}
	}
	flows := p.udpFlows(name)
	if len(flows) != 1 || flows[clientAddr].Addr().String() != first {
		t.Fatalf("flow table %v, want %s → %s", flows, clientAddr, first)
	}
	eventually(t, "the idle flow to expire", func() bool { return len(p.udpFlows(name)) == 0 })
	if st := Counters(p); st[CounterUDPFlowsExpired] != 1 || st[CounterUDPFlows] != 1 {
		t.Errorf("udp_flows=%d udp_flows_expired=%d, want 1 and 1", st[CounterUDPFlows], st[CounterUDPFlowsExpired])
	}
	// A new datagram opens a new flow, to the next backend.
	ans, err = askUDP(client, addr, "q2")
	if err != nil {
		t.Fatal(err)
	}
	if backendOf(ans) == first {
		t.Errorf("new flow went to %s again; round robin should move on", first)
	}
}

func TestSCTPIsRefusedAndCounted(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("sctp", "10.96.0.10", v1.ProtocolSCTP, 80))
	p.OnServiceAdd(makeService("web", "10.96.0.11", v1.ProtocolTCP, 80))
	mustSync(t, p)
	mustSync(t, p) // counted once, not per sync
	if st := Counters(p); st[CounterSkippedProtocol] != 1 {
		t.Errorf("skipped_protocol = %d, want 1", st[CounterSkippedProtocol])
	}
	ls := Listeners(p)
	if len(ls) != 1 || ls[0].Service != spn("web", v1.ProtocolTCP) {
		t.Fatalf("listeners %+v, want only ns/web", ls)
	}
}

func TestPortRangeExhaustionIsPerService(t *testing.T) {
	port := freePort(t)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		PortRange: PortRange{Begin: port, End: port}})
	p.OnServiceAdd(makeService("a", "10.96.0.10", v1.ProtocolTCP, 80))
	mustSync(t, p)
	p.OnServiceAdd(makeService("b", "10.96.0.11", v1.ProtocolTCP, 80))
	err := p.Sync(context.Background())
	var se *ServiceError
	if !errors.Is(err, ErrPortsExhausted) || !errors.As(err, &se) || se.Service != spn("b", v1.ProtocolTCP) {
		t.Fatalf("Sync = %v, want ErrPortsExhausted for ns/b", err)
	}
	if addr, ok := ProxyAddr(p, spn("a", v1.ProtocolTCP), false); !ok || int(addr.Port()) != port {
		t.Fatalf("ns/a lost its socket: %v %v", addr, ok)
	}
	// A UDP service may use the same port number.
	p.OnServiceAdd(makeService("c", "10.96.0.12", v1.ProtocolUDP, 53))
	err = p.Sync(context.Background())
	if errors.As(err, &se) && se.Service == spn("c", v1.ProtocolUDP) {
		t.Fatalf("UDP service refused: %v", err)
	}
	// Freeing the port lets the failed service in at the next sync.
	p.OnServiceDelete(makeService("a", "10.96.0.10", v1.ProtocolTCP, 80))
	mustSync(t, p)
	if addr, ok := ProxyAddr(p, spn("b", v1.ProtocolTCP), false); !ok || int(addr.Port()) != port {
		t.Fatalf("ns/b not served after the port was freed: %v %v", addr, ok)
	}
	if st := Counters(p); st[CounterServiceErrors] == 0 {
		t.Error("service_errors = 0")
	}
}

func TestNodePortAndExternalPolicyNoCapture(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	startBackend(t, "127.0.0.2", port)
	startBackend(t, "127.0.0.3", port)
	nodePort := freePort(t)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80, withNodePort(nodePort), withExternalLocal()))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.3", node: "node-b"}))
	mustSync(t, p)
	np := netip.MustParseAddrPort(fmt.Sprintf("127.0.0.1:%d", nodePort))
	for range 4 {
		ans, err := askTCP(np, "x")
		if err != nil {
			t.Fatal(err)
		}
		if backendOf(ans) != "127.0.0.2" {
			t.Fatalf("externalTrafficPolicy Local: node port reached %s", backendOf(ans))
		}
	}
	internal, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	seen := map[string]bool{}
	for range 4 {
		ans, err := askTCP(internal, "x")
		if err != nil {
			t.Fatal(err)
		}
		seen[backendOf(ans)] = true
	}
	if len(seen) != 2 {
		t.Fatalf("cluster traffic reached %v, want both endpoints", seen)
	}
}

func TestSessionAffinityThroughProxy(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	startBackend(t, "127.0.0.2", port)
	startBackend(t, "127.0.0.3", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80, withAffinity(60)))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}, epSpec{ip: "127.0.0.3"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	seen := map[string]bool{}
	for range 6 {
		ans, err := askTCP(addr, "x")
		if err != nil {
			t.Fatal(err)
		}
		seen[backendOf(ans)] = true
	}
	if len(seen) != 1 {
		t.Fatalf("one client reached %v with ClientIP affinity", seen)
	}
}

func TestCaptureBindServesServiceAddresses(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.100.0.1", "127.100.0.2")
	svcPort := freePort(t, "127.100.0.1", "127.100.0.2")
	startBackend(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureBind, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "127.100.0.1", v1.ProtocolTCP, svcPort, withExternalIPs("127.100.0.2")))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	for _, vip := range []string{"127.100.0.1", "127.100.0.2"} {
		ans, err := askTCP(netip.MustParseAddrPort(fmt.Sprintf("%s:%d", vip, svcPort)), "x")
		if err != nil || ans != "127.0.0.2:x" {
			t.Fatalf("%s: %q %v", vip, ans, err)
		}
	}
}

func TestGracePeriodClosesConnectionsToRemovedEndpoints(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	startBackend(t, "127.0.0.2", port)
	startBackend(t, "127.0.0.3", port)
	clk := clocktesting.NewFakeClock(time.Now())
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		Common: engine.Common{Clock: clk}, EndpointCloseGracePeriod: time.Minute})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)

	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	ask := func(msg string) (string, error) {
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if ans, err := ask("1"); err != nil || ans != "127.0.0.2:1\n" {
		t.Fatalf("%q %v", ans, err)
	}
	p.OnEndpointSliceUpdate(nil, makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.3"}))
	mustSync(t, p)
	// New connections go to the new endpoint at once...
	if ans, err := askTCP(addr, "n"); err != nil || backendOf(ans) != "127.0.0.3" {
		t.Fatalf("new connection: %q %v", ans, err)
	}
	// ...the established one keeps working until the grace period ends...
	if ans, err := ask("2"); err != nil || ans != "127.0.0.2:2\n" {
		t.Fatalf("established connection broken before the grace period: %q %v", ans, err)
	}
	eventually(t, "grace timer to be armed", func() bool { return clk.HasWaiters() })
	clk.Step(time.Minute)
	// ...and is closed after it.
	eventually(t, "the connection to the removed endpoint to close", func() bool {
		return Counters(p)[CounterGraceClosed] == 1
	})
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("connection to a removed endpoint still open after the grace period")
	}
}

// TestManyConnectionsNoLeak opens 1,000 concurrent proxied connections,
// closes them, closes the proxier and checks that descriptors and
// goroutines come back to where they were.
func TestManyConnectionsNoLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	port := freePort(t, "127.0.0.2")
	b := startBackend(t, "127.0.0.2", port)
	_ = b
	time.Sleep(10 * time.Millisecond)
	fds0, g0 := countFDs(), runtime.NumGoroutine()

	p, err := NewProxier(Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), Common: engine.Common{NodeName: testNode}}, Interfaces{})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)

	const n = 1000
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 100) // bound concurrent dials (listen backlog)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", addr.String(), 10*time.Second)
			if err != nil {
				errs <- err
				return
			}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			conns[i] = c
			if _, err := io.WriteString(c, "x\n"); err != nil {
				errs <- err
				return
			}
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "127.0.0.2:x\n" {
				errs <- fmt.Errorf("answer %q: %v", line, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// All 1,000 are open at once here.
	p.conns.mu.Lock()
	active := len(p.conns.active)
	p.conns.mu.Unlock()
	if active != n {
		t.Fatalf("%d proxied connections active, want %d", active, n)
	}
	for _, c := range conns {
		c.Close()
	}
	eventually(t, "every proxied connection to end", func() bool {
		p.conns.mu.Lock()
		defer p.conns.mu.Unlock()
		return len(p.conns.active) == 0
	})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	// The backend's own per-connection goroutines end when it sees EOF.
	if g := settleGoroutines(g0); g > g0 {
		t.Errorf("goroutines: %d before, %d after", g0, g)
	}
	for i := 0; i < 200 && countFDs() > fds0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if fds := countFDs(); fds > fds0 {
		t.Errorf("file descriptors: %d before, %d after", fds0, fds)
	}
}

func TestCloseReleasesSocketsAndGoroutines(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	startBackend(t, "127.0.0.2", port)
	time.Sleep(10 * time.Millisecond)
	fds0, g0 := countFDs(), runtime.NumGoroutine()
	p, err := NewProxier(Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), Common: engine.Common{NodeName: testNode}}, Interfaces{})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnServiceAdd(makeService("dns", "10.96.0.10", v1.ProtocolUDP, 53))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	p.OnEndpointSliceAdd(makeSlice("dns", v1.ProtocolUDP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	tcpAddr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	udpAddr, _ := ProxyAddr(p, spn("dns", v1.ProtocolUDP), false)
	// An open TCP connection and a live UDP flow at Close time.
	c, err := net.Dial("tcp", tcpAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "x\n")
	bufio.NewReader(c).ReadString('\n')
	u, _ := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	defer u.Close()
	if _, err := askUDP(u, udpAddr, "q"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- p.Run(ctx) }()
	cancel()
	<-runDone

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Sync after Close = %v, want ErrClosed", err)
	}
	c.Close()
	u.Close()
	if g := settleGoroutines(g0); g > g0 {
		t.Errorf("goroutines: %d before, %d after Close", g0, g)
	}
	for i := 0; i < 200 && countFDs() > fds0; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	if fds := countFDs(); fds > fds0 {
		t.Errorf("file descriptors: %d before, %d after Close", fds0, fds)
	}
}

func TestUDPFlowEndsWhenItsEndpointLeaves(t *testing.T) {
	port := freePort(t, "127.0.0.2", "127.0.0.3")
	startBackend(t, "127.0.0.2", port)
	startBackend(t, "127.0.0.3", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"), UDPIdleTimeout: time.Hour})
	p.OnServiceAdd(makeService("dns", "10.96.0.10", v1.ProtocolUDP, 53))
	p.OnEndpointSliceAdd(makeSlice("dns", v1.ProtocolUDP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	name := spn("dns", v1.ProtocolUDP)
	addr, _ := ProxyAddr(p, name, false)
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if ans, err := askUDP(client, addr, "a"); err != nil || backendOf(ans) != "127.0.0.2" {
		t.Fatalf("%q %v", ans, err)
	}
	p.OnEndpointSliceUpdate(nil, makeSlice("dns", v1.ProtocolUDP, port, epSpec{ip: "127.0.0.3"}))
	mustSync(t, p)
	if flows := p.udpFlows(name); len(flows) != 0 {
		t.Fatalf("flow to the removed endpoint still open after Sync: %v", flows)
	}
	// The same client (same source port) now reaches the new endpoint.
	if ans, err := askUDP(client, addr, "b"); err != nil || backendOf(ans) != "127.0.0.3" {
		t.Fatalf("%q %v", ans, err)
	}
}

func TestSyncPlansOnlyChangedServices(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("a", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnServiceAdd(makeService("b", "10.96.0.11", v1.ProtocolTCP, 80))
	p.OnServiceAdd(makeService("s", "10.96.0.12", v1.ProtocolSCTP, 80))
	mustSync(t, p)
	plan := func(name string) *servicePlan { return p.svc.services[spn(name, v1.ProtocolTCP)].plan }
	a, b := plan("a"), plan("b")
	addrB, _ := ProxyAddr(p, spn("b", v1.ProtocolTCP), false)

	if p.svc.lastPlans != 3 {
		t.Errorf("first sync planned %d service ports, want 3", p.svc.lastPlans)
	}
	p.OnEndpointSliceAdd(makeSlice("a", v1.ProtocolTCP, 8080, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	if plan("a") == a || p.svc.lastPlans != 1 {
		t.Errorf("endpoint change of a: a re-planned %v, %d service ports planned; want true, 1", plan("a") != a, p.svc.lastPlans)
	}
	if plan("b") != b {
		t.Error("unchanged service b was planned again")
	}
	if got, _ := ProxyAddr(p, spn("b", v1.ProtocolTCP), false); got != addrB {
		t.Errorf("b's socket moved from %s to %s", addrB, got)
	}
	if n := Counters(p)[CounterSkippedProtocol]; n != 1 {
		t.Errorf("skipped_protocol = %d after two syncs, want 1", n)
	}
	// A change of the node's zone may change endpoint selection everywhere.
	p.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{v1.LabelTopologyZone: "z"}}})
	mustSync(t, p)
	if p.svc.lastPlans != 3 {
		t.Errorf("a node topology change planned %d service ports, want all 3", p.svc.lastPlans)
	}
	// Deleting the SCTP service forgets it; re-adding counts it again.
	p.OnServiceDelete(makeService("s", "10.96.0.12", v1.ProtocolSCTP, 80))
	mustSync(t, p)
	p.OnServiceAdd(makeService("s", "10.96.0.12", v1.ProtocolSCTP, 80))
	mustSync(t, p)
	if n := Counters(p)[CounterSkippedProtocol]; n != 2 {
		t.Errorf("skipped_protocol = %d, want 2", n)
	}
}

func TestUDPFlowLimit(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	startBackend(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		UDPIdleTimeout: time.Hour, MaxUDPFlows: 2})
	p.OnServiceAdd(makeService("dns", "10.96.0.10", v1.ProtocolUDP, 53))
	p.OnEndpointSliceAdd(makeSlice("dns", v1.ProtocolUDP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("dns", v1.ProtocolUDP), false)
	var clients []*net.UDPConn
	for range 3 {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	for i, c := range clients[:2] {
		if _, err := askUDP(c, addr, "q"); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
	}
	// The third client's datagram is dropped: no answer, counted.
	clients[2].SetDeadline(time.Now().Add(200 * time.Millisecond))
	clients[2].WriteToUDPAddrPort([]byte("q"), addr)
	buf := make([]byte, 64)
	if _, _, err := clients[2].ReadFromUDPAddrPort(buf); err == nil {
		t.Fatal("a third flow was opened past MaxUDPFlows=2")
	}
	eventually(t, "the drop to be counted", func() bool { return Counters(p)[CounterUDPFlowLimit] == 1 })
	if n := len(p.udpFlows(spn("dns", v1.ProtocolUDP))); n != 2 {
		t.Fatalf("%d flows, want 2", n)
	}
}
