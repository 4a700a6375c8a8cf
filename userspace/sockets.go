package userspace

import (
	"context"
	"net"
	"net/netip"
)

// Sockets is the socket layer the proxier drives, so tests can inject
// failures (a port that cannot be bound, a dial that fails). The real
// implementation is OSSockets. Implementations should return *net.TCPConn
// and *net.TCPListener where they can: the proxy copies between two
// *net.TCPConn with io.Copy, which splices on Linux.
type Sockets interface {
	// ListenTCP listens on addr (port 0: kernel-chosen).
	ListenTCP(addr netip.AddrPort) (net.Listener, error)
	// ListenUDP binds addr (port 0: kernel-chosen).
	ListenUDP(addr netip.AddrPort) (*net.UDPConn, error)
	// DialTCP connects to a backend.
	DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// DialUDP opens a connected UDP socket to a backend.
	DialUDP(addr netip.AddrPort) (*net.UDPConn, error)
}

// OSSockets opens real sockets.
type OSSockets struct{}

var _ Sockets = OSSockets{}

// ListenTCP implements Sockets.
func (OSSockets) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	return listenTCP(tcpNetwork(addr.Addr()), net.TCPAddrFromAddrPort(addr))
}

// ListenUDP implements Sockets.
func (OSSockets) ListenUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	return net.ListenUDP(udpNetwork(addr.Addr()), net.UDPAddrFromAddrPort(addr))
}

// DialTCP implements Sockets.
func (OSSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, tcpNetwork(addr.Addr()), addr.String())
}

// DialUDP implements Sockets.
func (OSSockets) DialUDP(addr netip.AddrPort) (*net.UDPConn, error) {
	return net.DialUDP(udpNetwork(addr.Addr()), nil, net.UDPAddrFromAddrPort(addr))
}

func tcpNetwork(a netip.Addr) string {
	if a.Is4() || a.Is4In6() {
		return "tcp4"
	}
	return "tcp6"
}

func udpNetwork(a netip.Addr) string {
	if a.Is4() || a.Is4In6() {
		return "udp4"
	}
	return "udp6"
}

// addrPortOf converts a net.Addr of a TCP or UDP socket.
func addrPortOf(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
