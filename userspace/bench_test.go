package userspace

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Benchmarks compare the userspace proxy (CaptureNone, on loopback) with a
// direct connection to the same backend, in the same run. Run them with
//
//	go test -run '^$' -bench . -benchtime 2000x -count 1 ./userspace/
//
// (BenchmarkTCPStream wants a byte budget: -benchtime 1s is fine there.)

type benchEnv struct {
	p       *Proxier
	direct  netip.AddrPort
	proxied netip.AddrPort
}

// newBenchEnv starts a backend (echo by line on TCP, echo on UDP, plus a
// discarding TCP sink on sinkPort) and a proxier in front of it.
func newBenchEnv(b *testing.B, proto v1.Protocol) *benchEnv {
	b.Helper()
	port := freePort(b, "127.0.0.2")
	startBackend(b, "127.0.0.2", port)
	p := newTestProxier(b, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("bench", "10.96.0.10", proto, 80))
	p.OnEndpointSliceAdd(makeSlice("bench", proto, port, epSpec{ip: "127.0.0.2"}))
	mustSync(b, p)
	addr, ok := ProxyAddr(p, spn("bench", proto), false)
	if !ok {
		b.Fatal("no proxy socket")
	}
	return &benchEnv{p: p, direct: netip.MustParseAddrPort(fmt.Sprintf("127.0.0.2:%d", port)), proxied: addr}
}

// startSink accepts connections and discards what they send; when the
// sender half-closes it answers with the byte count.
func startSink(b *testing.B, ip string) netip.AddrPort {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
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
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d\n", n)
			}()
		}
	}()
	return addrPortOf(ln.Addr())
}

// BenchmarkTCPStream: one long stream of 64 KiB writes (4 per op), direct and
// proxied; also reports the process's CPU time per byte.
func BenchmarkTCPStream(b *testing.B) {
	sink := startSink(b, "127.0.0.2")
	p := newTestProxier(b, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	p.OnServiceAdd(makeService("sink", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("sink", v1.ProtocolTCP, int(sink.Port()), epSpec{ip: "127.0.0.2"}))
	mustSync(b, p)
	proxied, _ := ProxyAddr(p, spn("sink", v1.ProtocolTCP), false)
	chunk := make([]byte, 64<<10)
	for _, bc := range []struct {
		name string
		to   netip.AddrPort
	}{{"direct", sink}, {"proxied", proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(bc.to))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const perOp = 4 // 256 KiB per op, so that -benchtime 2000x streams 512 MiB
			b.SetBytes(perOp * int64(len(chunk)))
			b.ResetTimer()
			cpu0 := processCPU()
			for range b.N * perOp {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			c.CloseWrite()
			var n int64
			total := int64(b.N * perOp * len(chunk))
			if _, err := fmt.Fscan(bufio.NewReader(c), &n); err != nil || n != total {
				b.Fatalf("sink got %d bytes (%v), want %d", n, err, total)
			}
			b.StopTimer()
			// CPU per byte for sender, proxy and sink together: unlike
			// MB/s it does not depend on how busy the machine's other
			// cores are.
			if cpu := processCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(total), "cpu-ns/B")
			}
		})
	}
}

func askOnce(to netip.AddrPort) error {
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(to))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := io.WriteString(c, "x\n"); err != nil {
		return err
	}
	var buf [64]byte
	n, err := c.Read(buf[:])
	if err != nil || n == 0 || buf[n-1] != '\n' {
		return fmt.Errorf("short answer %q: %v", buf[:n], err)
	}
	// Close from the client side first: the TIME_WAIT lands on the client.
	c.SetLinger(0)
	return nil
}

// BenchmarkConnectLatency: connect, one small request/response, close;
// reports the p50 and p99 of that round trip.
func BenchmarkConnectLatency(b *testing.B) {
	env := newBenchEnv(b, v1.ProtocolTCP)
	for _, bc := range []struct {
		name string
		to   netip.AddrPort
	}{{"direct", env.direct}, {"proxied", env.proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			for range b.N {
				start := time.Now()
				if err := askOnce(bc.to); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(start))
			}
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkConnectionsPerSecond: 100 concurrent clients, each doing
// connect + small request/response + close in a loop.
func BenchmarkConnectionsPerSecond(b *testing.B) {
	env := newBenchEnv(b, v1.ProtocolTCP)
	for _, bc := range []struct {
		name string
		to   netip.AddrPort
	}{{"direct", env.direct}, {"proxied", env.proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism((100 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := askOnce(bc.to); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
		})
	}
}

// BenchmarkUDP: datagram round trips (send, wait for the echo) from 8
// clients at once; reports packets (round trips) per second.
func BenchmarkUDP(b *testing.B) {
	env := newBenchEnv(b, v1.ProtocolUDP)
	env.p.cfg.UDPIdleTimeout = time.Minute
	for _, bc := range []struct {
		name string
		to   netip.AddrPort
	}{{"direct", env.direct}, {"proxied", env.proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetParallelism(4)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")})
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				buf := make([]byte, 2048)
				msg := []byte("ping")
				for pb.Next() {
					c.SetDeadline(time.Now().Add(5 * time.Second))
					if _, err := c.WriteToUDPAddrPort(msg, bc.to); err != nil {
						b.Error(err)
						return
					}
					if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pkts/s")
		})
	}
}

// BenchmarkIdleConnectionMemory opens b.N idle connections (one exchange
// each, then nothing, all kept open) and reports heap+stack per
// connection, direct (client and backend, both in this process) and
// proxied (the same plus the proxy); the difference is the proxy's cost
// per idle connection. It also reports open descriptors per connection
// (Linux).
func BenchmarkIdleConnectionMemory(b *testing.B) {
	env := newBenchEnv(b, v1.ProtocolTCP)
	measure := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse + ms.StackInuse
	}
	for _, bc := range []struct {
		name string
		to   netip.AddrPort
	}{{"direct", env.direct}, {"proxied", env.proxied}} {
		b.Run(bc.name, func(b *testing.B) {
			before := measure()
			fds0 := countFDs()
			conns := make([]net.Conn, 0, b.N)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for range b.N {
				c, err := net.Dial("tcp", bc.to.String())
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
				io.WriteString(c, "x\n")
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := measure()
			b.ReportMetric(float64(int64(after)-int64(before))/float64(b.N), "B/conn")
			if fds0 >= 0 {
				// Client and backend sockets (2 per connection, both in
				// this process), plus the proxy's when proxied.
				b.ReportMetric(float64(countFDs()-fds0)/float64(b.N), "fds/conn")
			}
		})
	}
}
