package userspace

import (
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// mute is a TCP backend that accepts and reads but never answers nor
// closes (issue #14, item 6).
type mute struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startMute(t *testing.T, ip string, port int) *mute {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	m := &mute{ln: ln}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m.mu.Lock()
			m.conns = append(m.conns, c)
			m.mu.Unlock()
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				io.Copy(io.Discard, c) // the request, up to the half-close
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		m.mu.Lock()
		for _, c := range m.conns {
			c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
	})
	return m
}

// Clients that send a request and leave, to a backend that accepts and
// never answers: once the half-close timeout passes, every proxied
// connection is reset on both sides, and its sockets and goroutines are
// gone (before, each held two sockets and two goroutines until the backend
// died).
func TestHalfClosedConnectionToSilentBackendIsReleased(t *testing.T) {
	port := freePort(t, "127.0.0.2")
	m := startMute(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		TCPHalfCloseTimeout: 50 * time.Millisecond})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)
	goroutines := runtime.NumGoroutine()

	const clients = 20
	for range clients {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
		c.Close()
	}
	eventually(t, "every client to be proxied", func() bool { return Counters(p)[CounterTCPProxied] == clients })
	eventually(t, "the proxied connections to be released", func() bool {
		p.conns.mu.Lock()
		defer p.conns.mu.Unlock()
		return len(p.conns.active) == 0
	})
	// The proxy reset its side: the backend can no longer write.
	m.mu.Lock()
	conns := append([]net.Conn(nil), m.conns...)
	m.mu.Unlock()
	if len(conns) != clients {
		t.Fatalf("backend saw %d connections, want %d", len(conns), clients)
	}
	for i, c := range conns {
		var err error
		for range 50 {
			if _, err = io.WriteString(c, "late\n"); err != nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		if err == nil {
			t.Fatalf("backend connection %d still open on the proxy's side", i)
		}
	}
	if n := Counters(p)[CounterHalfCloseReset]; n != clients {
		t.Errorf("%s = %d, want %d", CounterHalfCloseReset, n, clients)
	}
	if n := settleGoroutines(goroutines); n > goroutines {
		t.Errorf("%d goroutines left, %d before the clients", n, goroutines)
	}
}

// A half-closed connection whose other side keeps talking is not cut, even
// when the whole answer takes several timeouts.
func TestHalfCloseTimeoutSparesATalkingBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(io.Discard, c) // the request, up to the client's half-close
		for range 8 {          // the answer: 8 pieces, 20ms apart (160ms)
			time.Sleep(20 * time.Millisecond)
			if _, err := io.WriteString(c, "piece\n"); err != nil {
				return
			}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		TCPHalfCloseTimeout: 60 * time.Millisecond})
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
	io.WriteString(c, "request\n")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || len(got) != 8*len("piece\n") {
		t.Fatalf("answer %q, %v; want 8 pieces and a clean end", got, err)
	}
	if n := Counters(p)[CounterHalfCloseReset]; n != 0 {
		t.Errorf("%s = %d, want 0", CounterHalfCloseReset, n)
	}
}
