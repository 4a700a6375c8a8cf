//go:build linux

package nftablestest

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/svcproxy/svcproxy/nftables"
)

// LocalhostSockets is a fake nftables.LocalhostSockets over real loopback
// sockets, for tests of the localhost node-port proxy that must not bind
// the node ports themselves: ListenTCP listens on a kernel-chosen port of
// the asked address (Addr tells which), DialTCP connects to the address a
// test gave the endpoint with SetBackend (refused, as an unreachable
// endpoint, when it gave none). Safe for concurrent use.
type LocalhostSockets struct {
	mu         sync.Mutex
	listening  map[netip.AddrPort]netip.AddrPort
	backends   map[netip.AddrPort]netip.AddrPort
	failListen map[netip.AddrPort]error
	listens    int
}

var _ nftables.LocalhostSockets = (*LocalhostSockets)(nil)

// NewLocalhostSockets returns a fake with no listeners and no backends.
func NewLocalhostSockets() *LocalhostSockets {
	return &LocalhostSockets{listening: map[netip.AddrPort]netip.AddrPort{},
		backends: map[netip.AddrPort]netip.AddrPort{}, failListen: map[netip.AddrPort]error{}}
}

// SetBackend makes connections to endpoint go to real (a server of the
// test).
func (s *LocalhostSockets) SetBackend(endpoint, real netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends[endpoint] = real
}

// FailListen makes ListenTCP on addr fail with err (nil: succeed again).
func (s *LocalhostSockets) FailListen(addr netip.AddrPort, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failListen, addr)
	} else {
		s.failListen[addr] = err
	}
}

// Addr returns where the listener asked for addr listens, if it is open.
func (s *LocalhostSockets) Addr(addr netip.AddrPort) (netip.AddrPort, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.listening[addr]
	return a, ok
}

// Listens is the number of successful ListenTCP calls.
func (s *LocalhostSockets) Listens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listens
}

// ListenTCP implements nftables.LocalhostSockets.
func (s *LocalhostSockets) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	s.mu.Lock()
	err := s.failListen[addr]
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr.Addr(), 0)))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listening[addr] = ln.Addr().(*net.TCPAddr).AddrPort()
	s.listens++
	return &fakeListener{TCPListener: ln, s: s, addr: addr}, nil
}

// DialTCP implements nftables.LocalhostSockets.
func (s *LocalhostSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	s.mu.Lock()
	real, ok := s.backends[addr]
	s.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", real.String())
}

// fakeListener forgets its address when closed.
type fakeListener struct {
	*net.TCPListener
	s    *LocalhostSockets
	addr netip.AddrPort
	once sync.Once
}

func (l *fakeListener) Close() error {
	l.once.Do(func() {
		l.s.mu.Lock()
		delete(l.s.listening, l.addr)
		l.s.mu.Unlock()
	})
	return l.TCPListener.Close()
}
