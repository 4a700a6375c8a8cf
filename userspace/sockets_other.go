//go:build !linux

package userspace

import "net"

func listenTCP(network string, addr *net.TCPAddr) (net.Listener, error) {
	return net.ListenTCP(network, addr)
}
