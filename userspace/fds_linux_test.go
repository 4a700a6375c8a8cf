package userspace

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// An idle proxied TCP connection holds two descriptors in the proxy: the
// accepted socket and the dialled one. (With io.Copy splicing each
// direction it held six: a pipe per direction for the connection's life.)
// Pipes are taken per burst of data, and at most idlePipes empty ones are
// kept for reuse.
func TestDescriptorsPerIdleConnection(t *testing.T) {
	if countFDs() < 0 {
		t.Skip("no /proc/self/fd here")
	}
	port := freePort(t, "127.0.0.2")
	startBackend(t, "127.0.0.2", port)
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, port, epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("web", v1.ProtocolTCP), false)

	const conns = 100
	before := countFDs()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		// One exchange, so that both directions have spliced data.
		io.WriteString(c, "x\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	after := countFDs()
	// Each connection also holds the client's socket and the backend's
	// accepted one, both in this process.
	proxy := after - before - 2*conns
	t.Logf("%d fds for %d idle connections: %.2f per connection in the proxy", after-before, conns, float64(proxy)/conns)
	if limit := 2*conns + 2*idlePipes; proxy > limit {
		t.Errorf("the proxy holds %d descriptors for %d idle connections, want at most %d (2 each, plus %d kept pipes)",
			proxy, conns, limit, idlePipes)
	}
}

// A large transfer each way, with a reader slower than the writer (so the
// proxy's writes block), arrives intact.
func TestSplicedStreamIntegrity(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // echo everything, then close
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	port := addrPortOf(ln.Addr()).Port()
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("echo", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("echo", v1.ProtocolTCP, int(port), epSpec{ip: "127.0.0.2"}))
	mustSync(t, p)
	addr, _ := ProxyAddr(p, spn("echo", v1.ProtocolTCP), false)

	data := make([]byte, 8<<20)
	rand.Read(data)
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	errc := make(chan error, 1)
	go func() {
		for off := 0; off < len(data); {
			n := min(len(data)-off, 100_000+off%7919)
			if _, err := c.Write(data[off : off+n]); err != nil {
				errc <- err
				return
			}
			off += n
		}
		errc <- c.CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for i := 0; ; i++ {
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", got.Len(), err)
		}
		if i%256 == 0 {
			time.Sleep(time.Millisecond) // a slow reader
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("got %d bytes back, want the %d sent, identical", got.Len(), len(data))
	}
}

// Connections accepted by OSSockets have Go's default keepalive, inherited
// from the listening socket.
func TestAcceptedConnectionsKeepAlive(t *testing.T) {
	ln, err := OSSockets{}.ListenTCP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rc, err := a.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		for _, o := range []struct {
			name       string
			level, opt int
			want       int
		}{
			{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
			{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
			{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
			{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		} {
			if v, err := unix.GetsockoptInt(int(fd), o.level, o.opt); err != nil || v != o.want {
				t.Errorf("%s = %d (%v), want %d", o.name, v, err, o.want)
			}
		}
	})
}

// With no pipe to be had (out of descriptors, say), bursts are copied
// through user space and the stream still arrives intact.
func TestSplicedStreamWithoutPipes(t *testing.T) {
	pipe2 = func([]int, int) error { return unix.EMFILE }
	// A cleanup registered first runs last: after the proxier's Close
	// has waited for its copies.
	t.Cleanup(func() { pipe2 = unix.Pipe2 })
	TestSplicedStreamIntegrity(t)
}
