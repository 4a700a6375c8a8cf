package userspacetest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
)

// Fakes is what a userspace.Proxier drives, faked: the iptables its
// capture rules are written to (in memory, traceable) and a socket layer
// over the real one that injects failures, counts calls and can send
// backend dials elsewhere.
type Fakes struct {
	// IPTables is the proxier's iptables (one IP family).
	IPTables *xtablestest.Fake
	// Sockets opens real sockets, through proxytest.Faults.
	Sockets *Sockets
}

// NewFakes returns fresh fakes for family (v1.IPv6Protocol; anything else
// means IPv4).
func NewFakes(family v1.IPFamily) *Fakes {
	if family != v1.IPv6Protocol {
		family = v1.IPv4Protocol
	}
	return &Fakes{IPTables: xtablestest.NewFake(family), Sockets: &Sockets{}}
}

// Interfaces returns the fakes as a userspace.Proxier's Interfaces.
func (f *Fakes) Interfaces() userspace.Interfaces {
	return userspace.Interfaces{IPTables: f.IPTables, Sockets: f.Sockets}
}

// Dump renders the fakes' state: the iptables tables and the sockets the
// proxier holds open through Sockets.
func (f *Fakes) Dump() string {
	var b strings.Builder
	b.WriteString(f.IPTables.Dump())
	b.WriteString(f.Sockets.Dump())
	return b.String()
}

// Sockets implements userspace.Sockets over the operating system's
// sockets (userspace.OSSockets), with the kit's fault vocabulary: each
// method calls Hit with its name ("ListenTCP", "ListenUDP", "DialTCP",
// "DialUDP") first and fails with the injected error, so a test can make
// a bind or a dial fail (FailOn("ListenTCP", 1, syscall.EADDRINUSE)). The
// zero value is ready to use.
type Sockets struct {
	proxytest.Faults
	// Redirect, if set, maps a backend address before it is dialed (to a
	// loopback stand-in for a pod address, say); an error fails the dial.
	Redirect func(netip.AddrPort) (netip.AddrPort, error)

	mu        sync.Mutex
	listening map[string]int // "tcp 127.0.0.1:40000" → open count
}

var _ userspace.Sockets = (*Sockets)(nil)

func (s *Sockets) opened(kind string, a netip.AddrPort) string {
	key := kind + " " + a.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listening == nil {
		s.listening = map[string]int{}
	}
	s.listening[key]++
	return key
}

func (s *Sockets) closed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listening[key]--; s.listening[key] <= 0 {
		delete(s.listening, key)
	}
}

// ListenTCP implements userspace.Sockets.
func (s *Sockets) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	if err := s.Hit("ListenTCP"); err != nil {
		return nil, err
	}
	ln, err := userspace.OSSockets{}.ListenTCP(addr)
	if err != nil {
		return nil, err
	}
	tl := &trackedListener{Listener: ln, s: s}
	var bound netip.AddrPort
	if ta, ok := ln.Addr().(*net.TCPAddr); ok {
		bound = ta.AddrPort()
	}
	tl.key = s.opened("tcp", bound)
	return tl, nil
}

// ListenUDP implements userspace.Sockets. The socket is not tracked by
// Dump once the proxier closes it (a *net.UDPConn cannot be wrapped).
func (s *Sockets) ListenUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	if err := s.Hit("ListenUDP"); err != nil {
		return nil, err
	}
	return userspace.OSSockets{}.ListenUDP(addr)
}

// DialTCP implements userspace.Sockets.
func (s *Sockets) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if err := s.Hit("DialTCP"); err != nil {
		return nil, err
	}
	to, err := s.redirect(addr)
	if err != nil {
		return nil, err
	}
	return userspace.OSSockets{}.DialTCP(ctx, to)
}

// DialUDP implements userspace.Sockets.
func (s *Sockets) DialUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	if err := s.Hit("DialUDP"); err != nil {
		return nil, err
	}
	to, err := s.redirect(addr)
	if err != nil {
		return nil, err
	}
	return userspace.OSSockets{}.DialUDP(to)
}

func (s *Sockets) redirect(addr netip.AddrPort) (netip.AddrPort, error) {
	if s.Redirect == nil {
		return addr, nil
	}
	return s.Redirect(addr)
}

// Dump lists the TCP listeners open through s, sorted.
func (s *Sockets) Dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.listening))
	for k := range s.listening {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "listen %s\n", k)
	}
	return b.String()
}

// trackedListener forgets its address in Dump when closed; Accept is the
// real listener's, so accepted connections are *net.TCPConn and the proxy
// still splices.
type trackedListener struct {
	net.Listener
	s    *Sockets
	key  string
	once sync.Once
}

func (l *trackedListener) Close() error {
	l.once.Do(func() { l.s.closed(l.key) })
	return l.Listener.Close()
}
