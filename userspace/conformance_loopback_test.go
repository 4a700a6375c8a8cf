package userspace_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// The loopback conformance run needs no root and sends real traffic
// through the proxier's data path:
//
//   - the capture rules are written to xtablestest.Fake, and the rule
//     tracer (userspacetest.Tracer.Route) decides, as the kernel would,
//     whether a packet is redirected and to which proxy socket, or is
//     rejected/dropped by the filter chain, or not proxied;
//   - a redirected packet is then really sent, from loopback, to that
//     proxy socket (bound on the unspecified address at a kernel-chosen
//     port), several times from fresh client sockets;
//   - the proxier dials the topology's pod addresses through a Sockets
//     layer that maps each pod address and port to a stand-in server on
//     loopback, which answers with the pod address and port it stands for.
//
// So the balancer, the dial/retry path, the TCP copy and the UDP flows are
// exercised for real, and the backends reported are the ones that
// answered. Client addresses cannot be preserved on loopback (every client
// is 127.0.0.1 or ::1), which is fine: the userspace proxy masquerades
// everything anyway, and ClientIP affinity shows as one client sticking.

const (
	loopbackAttempts       = 24 // upper bound per check
	loopbackStickyAttempts = 8  // answers needed to call a single backend sticky
)

// standIns are loopback servers standing in for pod addresses.
type standIns struct {
	loop  netip.Addr
	mu    sync.Mutex
	addrs map[netip.AddrPort]netip.AddrPort // pod ip:port → loopback listener
}

func startStandIns(t *testing.T, topo proxytest.Topology) *standIns {
	s := &standIns{loop: netip.MustParseAddr("127.0.0.1"), addrs: map[netip.AddrPort]netip.AddrPort{}}
	if topo.Family == v1.IPv6Protocol {
		s.loop = netip.IPv6Loopback()
	}
	var wg sync.WaitGroup
	var closers []func()
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
		wg.Wait()
	})
	for _, pod := range topo.Pods() {
		for _, port := range topo.ServerPorts {
			podAddr := netip.AddrPortFrom(pod.IP, uint16(port))
			answer := podAddr.String()
			ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.loop, 0)))
			if err != nil {
				t.Fatal(err)
			}
			tcpPort := ln.Addr().(*net.TCPAddr).Port
			// The UDP stand-in uses the same port number when it can.
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.loop, uint16(tcpPort))))
			if err != nil {
				ln.Close()
				t.Skipf("loopback UDP port %d busy: %v", tcpPort, err)
			}
			closers = append(closers, func() { ln.Close(); pc.Close() })
			s.addrs[podAddr] = netip.AddrPortFrom(s.loop, uint16(tcpPort))
			wg.Add(2)
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s\n", answer)
					c.Close()
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 512)
				for {
					_, from, err := pc.ReadFromUDPAddrPort(buf)
					if err != nil {
						return
					}
					pc.WriteToUDPAddrPort([]byte(answer), from)
				}
			}()
		}
	}
	return s
}

func (s *standIns) lookup(addr netip.AddrPort) (netip.AddrPort, error) {
	if to, ok := s.addrs[addr]; ok {
		return to, nil
	}
	return netip.AddrPort{}, &net.OpError{Op: "dial", Net: "stand-in", Err: syscall.ECONNREFUSED}
}

// loopbackProber implements proxytest.Sampler.
type loopbackProber struct {
	rules *userspacetest.Tracer
	loop  netip.Addr
}

func (l *loopbackProber) Trace(p proxytest.Packet) (proxytest.Result, error) {
	return l.TraceSample(p, proxytest.Result{})
}

func (l *loopbackProber) TraceSample(p proxytest.Packet, want proxytest.Result) (proxytest.Result, error) {
	sock, res, err := l.rules.Route(p)
	if err != nil || res.Verdict != proxytest.Forwarded {
		return res, err
	}
	to := netip.AddrPortFrom(l.loop, sock.Port())
	seen := map[netip.AddrPort]bool{}
	answers := 0
	for range loopbackAttempts {
		got, err := askLoopback(to, p.Protocol)
		if err != nil {
			return proxytest.Result{}, fmt.Errorf("rules redirect %s to proxy socket %s, but %v", p, to, err)
		}
		b, err := netip.ParseAddrPort(got)
		if err != nil {
			return proxytest.Result{}, fmt.Errorf("answer %q: %v", got, err)
		}
		seen[b] = true
		answers++
		all := true
		for _, w := range want.Backends {
			all = all && seen[w]
		}
		if all && len(want.Backends) > 0 && (!want.Sticky || answers >= loopbackStickyAttempts) {
			break
		}
	}
	out := proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: true,
		Sticky: answers >= loopbackStickyAttempts && len(seen) == 1}
	for b := range seen {
		out.Backends = append(out.Backends, b)
	}
	return out.Normalize(), nil
}

func (l *loopbackProber) Dump() string { return l.rules.Dump() }

// askLoopback makes one connection (TCP) or one flow from a fresh socket
// (UDP) to the proxy socket and returns the backend's answer.
func askLoopback(to netip.AddrPort, proto v1.Protocol) (string, error) {
	deadline := time.Now().Add(5 * time.Second)
	if proto == v1.ProtocolUDP {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("q")); err != nil {
			return "", err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	c, err := net.DialTimeout("tcp", to.String(), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(deadline)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func loopbackHarness(t *testing.T, topo proxytest.Topology, _ proxytest.Options) (proxy.Provider, proxytest.Tracer) {
	stand := startStandIns(t, topo)
	fakes := userspacetest.NewFakes(topo.Family)
	fakes.Sockets.Redirect = stand.lookup // dial stand-ins instead of pod addresses
	p, err := userspace.NewProxier(userspace.Config{
		Common:       engine.Common{NodeName: topo.NodeName, IPFamily: topo.Family},
		HostIP:       topo.NodeIP,
		ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR},
	}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rules := userspacetest.NewTracer(fakes, userspacetest.TracerConfig{Proxier: p, NodeIPs: []netip.Addr{topo.NodeIP}})
	return p, &loopbackProber{rules: rules, loop: stand.loop}
}

// TestConformanceLoopback runs the conformance table without root, with
// real traffic through the proxy sockets (see loopbackProber).
func TestConformanceLoopback(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			conformance.Run(t, fam, conformance.Harness{New: loopbackHarness, Quirks: quirks(topo)})
		})
	}
}
