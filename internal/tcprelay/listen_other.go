//go:build !linux

package tcprelay

import "net"

// ListenTCP listens on addr ("tcp4" or "tcp6").
func ListenTCP(network string, addr *net.TCPAddr) (net.Listener, error) {
	return net.ListenTCP(network, addr)
}
