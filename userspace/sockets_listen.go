package userspace

import (
	"net"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
)

// listenTCP listens with keepalive set once on the listening socket (see
// tcprelay.ListenTCP).
func listenTCP(network string, addr *net.TCPAddr) (net.Listener, error) {
	return tcprelay.ListenTCP(network, addr)
}
