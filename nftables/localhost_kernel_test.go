//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// kernelLocalhostProxier is a Proxier over the real kernel of the calling
// thread's network namespace.
func kernelLocalhostProxier(t *testing.T, cfg nftables.Config) *nftables.Proxier {
	t.Helper()
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		t.Skipf("nftables unavailable: %v", err)
	}
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// loopbackUp brings lo up in the test's fresh namespace.
func loopbackUp(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Skipf("ip link set lo up: %v %s", err, out)
	}
}

// dialLoopback connects to 127.0.0.1:port once (bounded), and reads the
// first line the server sends ("" when the connection failed).
func dialLoopback(port string) (string, error) {
	c, err := net.DialTimeout("tcp4", "127.0.0.1:"+port, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// serveGreeting accepts on ln and writes greeting to every connection,
// until ln is closed.
func serveGreeting(ln net.Listener, greeting string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(greeting))
		c.Close()
	}
}

func rejectedPackets(t *testing.T, nft knftables.Interface, proto string) uint64 {
	t.Helper()
	counters, err := nft.ListCounters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counters {
		if c.Name == "localhost-nodeport-rejected-"+proto && c.Packets != nil {
			return *c.Packets
		}
	}
	t.Fatalf("no counter localhost-nodeport-rejected-%s", proto)
	return 0
}

// TestKernelLocalhostNodePortsReject: on a real kernel, in a namespace of
// its own, with the gate on and no loopback node-port address a TCP
// connection to 127.0.0.1:<node port> is refused even though a socket
// listens there, and counted in the named counter; with the gate off (as
// v1.37.2 by default) the table does not touch it and the local socket
// answers; turning the gate off removes the localhost objects.
func TestKernelLocalhostNodePortsReject(t *testing.T) {
	inFreshNetns(t, func() {
		loopbackUp(t)
		ln, err := net.Listen("tcp4", "127.0.0.1:30000")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go serveGreeting(ln, "local socket")
		c := localhostCluster() // svc-0 has node port 30000

		on := kernelLocalhostProxier(t, localhostConfig(true))
		c.feed(on)
		mustSync(t, on)
		table := nft(t, "list table ip kube-proxy")
		for _, want := range []string{"counter localhost-nodeport-rejected-tcp", "tcp . 30000 : goto localhost-nodeport-reject-tcp"} {
			if !strings.Contains(table, want) {
				t.Errorf("table lacks %q:\n%s", want, table)
			}
		}
		ifs, _ := nftkernel.NewInterfaces(v1.IPv4Protocol)
		before := rejectedPackets(t, ifs.NFTables, "tcp")
		if got, err := dialLoopback("30000"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("gate on: 127.0.0.1:30000 answered %q (%v), want refused", got, err)
		}
		if after := rejectedPackets(t, ifs.NFTables, "tcp"); after <= before {
			t.Errorf("gate on: rejected-tcp counter %d -> %d, want it counted", before, after)
		}
		on.Close()

		off := kernelLocalhostProxier(t, localhostConfig(false))
		c.feed(off)
		mustSync(t, off)
		if table := nft(t, "list table ip kube-proxy"); strings.Contains(table, "localhost-nodeport") {
			t.Errorf("gate off left localhost objects:\n%s", table)
		}
		if got, err := dialLoopback("30000"); err != nil || got != "local socket" {
			t.Errorf("gate off: 127.0.0.1:30000 answered %q (%v), want the local socket", got, err)
		}
		off.Close()
	})
}

// nsSockets opens the localhost proxy's sockets inside one network
// namespace: the proxy dials endpoints from goroutines of its own, which
// run on threads of the test binary's namespace.
type nsSockets struct{ ns netns.NsHandle }

func (s nsSockets) in(f func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(s.ns); err != nil {
		return err
	}
	f()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the original netns: %v", err))
	}
	return nil
}

func (s nsSockets) ListenTCP(addr netip.AddrPort) (ln net.Listener, err error) {
	if e := s.in(func() { ln, err = net.Listen("tcp4", addr.String()) }); e != nil {
		return nil, e
	}
	return ln, err
}

func (s nsSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (c net.Conn, err error) {
	if e := s.in(func() {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp4", addr.String())
	}); e != nil {
		return nil, e
	}
	return c, err
}

// TestKernelLocalhostNodePortsProxy: on a real kernel, in a namespace of
// its own, with the gate on and 127.0.0.0/8 among the node-port addresses
// a TCP connection to 127.0.0.1:<node port> reaches the service's
// endpoint (a server on an address of the namespace) through the
// userspace proxy, while a UDP node port on loopback is rejected and
// counted; with the gate off, as v1.37.2 by default, nothing listens on
// the node port and the connection is refused.
func TestKernelLocalhostNodePortsProxy(t *testing.T) {
	inFreshNetns(t, func() {
		loopbackUp(t)
		// The endpoints' addresses live on the namespace's own lo.
		for _, args := range [][]string{
			{"addr", "add", "10.128.0.1/32", "dev", "lo"},
			{"addr", "add", "10.128.0.2/32", "dev", "lo"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Fatalf("ip %v: %v %s", args, err, out)
			}
		}
		for _, ep := range []string{"10.128.0.1:8080", "10.128.0.2:8080"} {
			ln, err := net.Listen("tcp4", ep)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go serveGreeting(ln, "endpoint "+ep)
		}
		ns, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
		if err != nil {
			t.Skipf("nftables unavailable: %v", err)
		}
		ifs.LocalhostSockets = nsSockets{ns: ns}
		on, err := nftables.NewProxier(localhostConfig(true, "127.0.0.0/8", "10.128.0.0/16"), ifs)
		if err != nil {
			t.Fatal(err)
		}
		c := localhostCluster() // svc-0: TCP node port 30000, endpoints 10.128.0.1-2:8080; svc-udp: 31053
		c.feed(on)
		mustSync(t, on)
		for i := 0; i < 4; i++ {
			if got, err := dialLoopback("30000"); err != nil || !strings.HasPrefix(got, "endpoint 10.128.0.") {
				t.Fatalf("gate on: 127.0.0.1:30000 answered %q (%v), want an endpoint", got, err)
			}
		}
		// UDP on loopback is rejected (ICMP port unreachable) and counted.
		u, err := net.Dial("udp4", "127.0.0.1:31053")
		if err != nil {
			t.Fatal(err)
		}
		u.Write([]byte("x"))
		u.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := u.Read(make([]byte, 8)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("gate on: UDP to 127.0.0.1:31053: %v, want refused", err)
		}
		u.Close()
		if n := rejectedPackets(t, ifs.NFTables, "udp"); n == 0 {
			t.Error("gate on: the UDP rejection was not counted")
		}
		if table := nft(t, "list table ip kube-proxy"); strings.Contains(table, "localhost-nodeport-reject-tcp") {
			t.Errorf("TCP rejected although the proxy serves it:\n%s", table)
		}
		on.Close()

		off := kernelLocalhostProxier(t, localhostConfig(false, "127.0.0.0/8", "10.128.0.0/16"))
		c.feed(off)
		mustSync(t, off)
		if got, err := dialLoopback("30000"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("gate off: 127.0.0.1:30000 answered %q (%v), want refused (nothing listens)", got, err)
		}
		if err := netnsCleanup(off); err != nil {
			t.Error(err)
		}
		off.Close()
	})
}

func netnsCleanup(p *nftables.Proxier) error { return p.Cleanup(context.Background()) }
