//go:build linux

package netnstest

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dialTCP connects like net.Dialer, but also catches an ICMP error that
// arrived while connect held the socket lock: on veth the REJECT's ICMP
// comes back inside the connect call itself, the kernel then only records
// a soft error (TcpExtLockDroppedIcmps) and the SYN would be retried after
// a second. With IP(V6)_RECVERR the ICMP error is still queued on the
// socket's error queue, which dialTCP reads (through a duplicate of the
// descriptor, which keeps the socket alive) when the connect times out.
func dialTCP(network string, laddr *net.TCPAddr, raddr string, timeout time.Duration) (net.Conn, error) {
	dup := -1
	defer func() {
		if dup >= 0 {
			unix.Close(dup)
		}
	}()
	d := net.Dialer{
		Timeout:   timeout,
		LocalAddr: laddr,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				level, opt := unix.IPPROTO_IP, unix.IP_RECVERR
				if network == "tcp6" {
					level, opt = unix.IPPROTO_IPV6, unix.IPV6_RECVERR
				}
				if serr = unix.SetsockoptInt(int(fd), level, opt, 1); serr != nil {
					return
				}
				dup, serr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
			})
			return errors.Join(err, serr)
		},
	}
	c, err := d.DialContext(context.Background(), network, raddr)
	if err == nil || dup < 0 {
		return c, err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		if qerr := queuedError(dup); qerr != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: qerr}
		}
	}
	return nil, err
}

// queuedError returns the errno of the first error on fd's error queue, or nil.
func queuedError(fd int) error {
	buf := make([]byte, 256)
	oob := make([]byte, 512)
	_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
	if err != nil {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		isErr := (m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR) ||
			(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR)
		if isErr && len(m.Data) >= 4 {
			if errno := binary.NativeEndian.Uint32(m.Data[:4]); errno != 0 {
				return syscall.Errno(errno)
			}
		}
	}
	return nil
}
