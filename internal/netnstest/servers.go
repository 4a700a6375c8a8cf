package netnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	v1 "k8s.io/api/core/v1"
)

// WorldName is the name the world namespace's servers answer with: the
// upstream router behind the node's default route, which answers for every
// service, external and load-balancer address that the node did not proxy.
const WorldName = "world"

// Answer is what a test server replies to each TCP connection and UDP
// datagram: "<name> <client-ip> <local-ip:port>\n".
type Answer struct {
	// Name is the pod name, or WorldName.
	Name string
	// Client is the source address the server saw.
	Client netip.Addr
	// Local is the address and port the connection arrived on (after any
	// DNAT).
	Local netip.AddrPort
}

func (a Answer) String() string { return fmt.Sprintf("%s %s %s", a.Name, a.Client, a.Local) }

// ParseAnswer parses a server's reply.
func ParseAnswer(s string) (Answer, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Answer{}, fmt.Errorf("netnstest: malformed answer %q", s)
	}
	c, err := netip.ParseAddr(f[1])
	if err != nil {
		return Answer{}, fmt.Errorf("netnstest: malformed answer %q: %w", s, err)
	}
	l, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return Answer{}, fmt.Errorf("netnstest: malformed answer %q: %w", s, err)
	}
	return Answer{Name: f[0], Client: c.Unmap(), Local: netip.AddrPortFrom(l.Addr().Unmap(), l.Port())}, nil
}

// servers are the TCP and UDP responders of one namespace.
type servers struct {
	name    string
	mu      sync.Mutex
	closers []interface{ Close() error }
	wg      sync.WaitGroup
}

// startServers opens a TCP listener and a UDP socket on every port, on the
// wildcard address of family, inside ns, and serves them until close.
func startServers(ns *Namespace, name string, family v1.IPFamily, ports []int) (*servers, error) {
	s := &servers{name: name}
	tcpNet, udpNet, wild := "tcp4", "udp4", "0.0.0.0"
	if family == v1.IPv6Protocol {
		tcpNet, udpNet, wild = "tcp6", "udp6", "::"
	}
	var lns []net.Listener
	var pcs []net.PacketConn
	err := Exec(ns, func() error {
		for _, p := range ports {
			addr := net.JoinHostPort(wild, fmt.Sprint(p))
			ln, err := net.Listen(tcpNet, addr)
			if err != nil {
				return fmt.Errorf("netnstest: %s: listen %s %s: %w", name, tcpNet, addr, err)
			}
			lns = append(lns, ln)
			pc, err := net.ListenPacket(udpNet, addr)
			if err != nil {
				return fmt.Errorf("netnstest: %s: listen %s %s: %w", name, udpNet, addr, err)
			}
			pcs = append(pcs, pc)
		}
		return nil
	})
	for _, ln := range lns {
		s.closers = append(s.closers, ln)
	}
	for _, pc := range pcs {
		s.closers = append(s.closers, pc)
	}
	if err != nil {
		s.close()
		return nil, err
	}
	for _, ln := range lns {
		s.wg.Add(1)
		go s.serveTCP(ln)
	}
	for _, pc := range pcs {
		s.wg.Add(1)
		if family == v1.IPv6Protocol {
			go s.serveUDP6(pc)
		} else {
			go s.serveUDP4(pc)
		}
	}
	return s, nil
}

func (s *servers) answer(client net.Addr, local netip.AddrPort) []byte {
	var ip netip.Addr
	switch a := client.(type) {
	case *net.TCPAddr:
		ip = a.AddrPort().Addr()
	case *net.UDPAddr:
		ip = a.AddrPort().Addr()
	}
	return []byte(Answer{Name: s.name, Client: ip.Unmap(), Local: local}.String() + "\n")
}

func (s *servers) serveTCP(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // transient (e.g. EMFILE); don't spin
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			local := c.LocalAddr().(*net.TCPAddr).AddrPort()
			_, _ = c.Write(s.answer(c.RemoteAddr(), netip.AddrPortFrom(local.Addr().Unmap(), local.Port())))
		}()
	}
}

// The UDP servers ask for each datagram's destination address so that the
// reply leaves from it (the world answers for whole ranges of addresses
// with one wildcard socket) and so that the answer can report it.

func (s *servers) serveUDP4(pc net.PacketConn) {
	defer s.wg.Done()
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	p := ipv4.NewPacketConn(pc)
	if err := p.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return
	}
	buf := make([]byte, 1500)
	for {
		_, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if cm == nil {
			continue
		}
		dst, _ := netip.AddrFromSlice(cm.Dst.To4())
		_, _ = p.WriteTo(s.answer(src, netip.AddrPortFrom(dst, port)), &ipv4.ControlMessage{Src: cm.Dst}, src)
	}
}

func (s *servers) serveUDP6(pc net.PacketConn) {
	defer s.wg.Done()
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	p := ipv6.NewPacketConn(pc)
	if err := p.SetControlMessage(ipv6.FlagDst, true); err != nil {
		return
	}
	buf := make([]byte, 1500)
	for {
		_, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if cm == nil {
			continue
		}
		dst, _ := netip.AddrFromSlice(cm.Dst.To16())
		_, _ = p.WriteTo(s.answer(src, netip.AddrPortFrom(dst.Unmap(), port)), &ipv6.ControlMessage{Src: cm.Dst}, src)
	}
}

// close stops every server and waits for its goroutines.
func (s *servers) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	cs := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	s.wg.Wait()
}
