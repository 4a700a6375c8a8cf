//go:build linux

package nftkernel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/nftables"
)

// NewNetlinkWriter returns the real nftables.NetlinkWriter: a raw
// NETLINK_NETFILTER socket per batch, sized for the batch, the batch
// nftables.WireBatch lays out sent as one datagram, and acknowledgements
// read until the kernel's verdict on the last message (nft does the same;
// an acknowledgement for every message would overflow the socket's
// receive queue on large batches). A refusal is a *nftables.BatchError.
func NewNetlinkWriter() nftables.NetlinkWriter { return netlinkWriter{} }

type netlinkWriter struct{}

const nlReplyTimeout = 30 * time.Second

func (w netlinkWriter) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	bufs, size := nftables.WireBatch(ctx, msgs)
	return sendBatch(bufs, size, msgs, 1, uint32(len(msgs)+1))
}

// sendBatch sends the batch laid out in bufs (size bytes in all) as one
// datagram and reads the kernel's verdict.
func sendBatch(bufs [][]byte, size int, msgs []netlink.Message, first, last uint32) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink bind: %w", err)
	}
	// The whole batch goes in one datagram (the kernel reads one batch per
	// datagram), so the send buffer must hold it; errors for many messages
	// may come back, so the receive buffer is sized likewise.
	sock := size + 64<<10
	if sock < 1<<20 {
		sock = 1 << 20
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sock)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4*sock)
	tv := unix.NsecToTimeval(nlReplyTimeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if _, err := unix.SendmsgBuffers(fd, bufs, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0); err != nil {
		return fmt.Errorf("netlink send of a %d-byte batch: %w", size, err)
	}
	return readBatchReplies(fd, msgs, first, last)
}

// readBatchReplies reads the kernel's replies: an error for each refused
// message and the acknowledgement of the last one, or one error for the
// batch as a whole (a failed commit, no permission), whose sequence
// number is the begin message's.
// replyBuffers are readBatchReplies' receive buffers (256 KiB each: a
// cold start writes a few batches, each allocated one before).
var replyBuffers = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func readBatchReplies(fd int, msgs []netlink.Message, first, last uint32) error {
	var firstErr error
	rbp := replyBuffers.Get().(*[]byte)
	defer replyBuffers.Put(rbp)
	rb := *rbp
	for {
		n, _, err := unix.Recvfrom(fd, rb, 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("netlink batch replies: %w", err)
		}
		replies, err := syscall.ParseNetlinkMessage(rb[:n])
		if err != nil {
			return fmt.Errorf("netlink batch replies: %w", err)
		}
		for _, r := range replies {
			if r.Header.Type != unix.NLMSG_ERROR || len(r.Data) < 4 {
				continue
			}
			seq := r.Header.Seq
			if seq < first || seq > last {
				continue // not ours
			}
			if e := int32(binary.NativeEndian.Uint32(r.Data)); e != 0 && firstErr == nil {
				be := &nftables.BatchError{Index: int(seq-first) - 1, Errno: unix.Errno(-e)}
				if be.Index >= 0 {
					be.Type = uint16(msgs[be.Index].Header.Type) & 0xff
				}
				firstErr = be
			}
			if seq == last || seq == first {
				return firstErr
			}
		}
	}
}
