//go:build !linux

package netnstest

import (
	"net"
	"time"
)

func dialTCP(network string, laddr *net.TCPAddr, raddr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, LocalAddr: laddr}
	return d.Dial(network, raddr)
}
