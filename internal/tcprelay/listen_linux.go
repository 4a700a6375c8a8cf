package tcprelay

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenTCP listens with Go's default keepalive for accepted connections
// (idle 15 s, interval 15 s, 9 probes) set once on the listening socket:
// Linux copies it to every accepted socket, which saves four setsockopt
// calls per accepted connection. network is "tcp4" or "tcp6".
func ListenTCP(network string, addr *net.TCPAddr) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			for _, o := range [...]struct{ level, opt, val int }{
				{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
				{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
				{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
				{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
			} {
				if err := unix.SetsockoptInt(int(fd), o.level, o.opt, o.val); err != nil && serr == nil {
					serr = err
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), network, addr.String())
}
