//go:build linux

package nftables

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkWriter sends one nftables transaction as a netlink batch, in the
// network namespace of the calling thread. The kernel applies a batch
// atomically: all of it or, on any error, none.
type NetlinkWriter interface {
	// WriteBatch sends msgs (nftables messages, without sequence numbers)
	// between a batch begin and end and returns the kernel's verdict: nil
	// once the batch is committed, else an error (a *BatchError when the
	// kernel refused it). Once it returned nil, the engine reuses the
	// memory of msgs' Data: a writer keeps nothing of them.
	WriteBatch(ctx context.Context, msgs []netlink.Message) error
}

// BatchError is a batch the kernel refused: Errno for message Index of the
// batch (-1: the batch as a whole, e.g. when the commit failed).
type BatchError struct {
	Index int
	Type  uint16 // the message's nftables type (NFT_MSG_…)
	Errno unix.Errno
}

func (e *BatchError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("netlink batch refused: %v", e.Errno)
	}
	return fmt.Sprintf("netlink batch refused at message %d (type %d): %v", e.Index, e.Type, e.Errno)
}

// Unwrap lets errors.Is(err, unix.ENOENT) and the like see the errno.
func (e *BatchError) Unwrap() error { return e.Errno }

// NewNetlinkWriter returns the real NetlinkWriter: a raw NETLINK_NETFILTER
// socket per batch, sized for the batch, and acknowledgements read until
// the kernel's verdict on the last message (nft does the same; an
// acknowledgement for every message would overflow the socket's receive
// queue on large batches).
func NewNetlinkWriter() NetlinkWriter { return netlinkWriter{} }

type netlinkWriter struct{}

// writeEncoded writes b with w. The context it hands WriteBatch carries
// b's wire layout (the encoder's arenas, each message's header in front of
// it), which the real writer sends as it lies, without a copy. A writer
// that wraps another and passes ctx and msgs on as it got them keeps that
// path by construction; any other writer just sees msgs. Nothing asks what
// w is.
func writeEncoded(ctx context.Context, w NetlinkWriter, b *encodedBatch) error {
	if b.wire != nil && len(b.msgs) > 0 {
		ctx = context.WithValue(ctx, wireKey{}, b)
	}
	return w.WriteBatch(ctx, b.msgs)
}

// wireKey is the context key of writeEncoded's *encodedBatch.
type wireKey struct{}

// wireOf is the wire layout ctx carries for msgs: nil unless it is the
// encoder's batch of exactly these messages (a writer between may have
// dropped, added or replaced some).
func wireOf(ctx context.Context, msgs []netlink.Message) *encodedBatch {
	b, _ := ctx.Value(wireKey{}).(*encodedBatch)
	if b == nil || len(msgs) == 0 || len(b.msgs) != len(msgs) || &b.msgs[0] != &msgs[0] {
		return nil
	}
	return b
}

const nlReplyTimeout = 30 * time.Second

func (w netlinkWriter) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if b := wireOf(ctx, msgs); b != nil {
		return w.writeWire(b)
	}
	return writeCopy(msgs)
}

// writeCopy sends msgs copied into one buffer.
func writeCopy(msgs []netlink.Message) error {
	buf, first, last := encodeBatch(msgs, 1)
	return sendBatch([][]byte{buf}, len(buf), msgs, first, last)
}

// maxWireSegments bounds the iovecs of one sendmsg (the kernel's
// UIO_MAXIOV is 1024); a batch in more arenas is copied (writeCopy).
const maxWireSegments = 1000

// writeWire sends b without copying it: one sendmsg whose buffers are the
// batch begin, the encoder's arenas as they are (each message's header
// already in front of it, sequence numbers as encodeBatch numbers them)
// and the batch end. The kernel reads the same bytes as writeCopy's
// (TestWireSegmentsAreTheBatch). A cold start's chunk is tens of MiB,
// which writeCopy holds twice while it is sent.
func (w netlinkWriter) writeWire(b *encodedBatch) error {
	n := len(b.msgs)
	if len(b.wire)+2 > maxWireSegments || len(b.lastHdr) != unix.NLMSG_HDRLEN {
		return writeCopy(b.msgs)
	}
	bufs, size := wireBuffers(b)
	return sendBatch(bufs, size, b.msgs, 1, uint32(n+1))
}

// wireBuffers lays b out as WriteBatch's batch: the begin (sequence
// number 1), b's arenas (its messages numbered 2 on, the last asking for
// an acknowledgement, set here) and the end.
func wireBuffers(b *encodedBatch) (bufs [][]byte, size int) {
	flags := binary.NativeEndian.Uint16(b.lastHdr[6:])
	binary.NativeEndian.PutUint16(b.lastHdr[6:], flags|unix.NLM_F_ACK)
	bufs = make([][]byte, 0, len(b.wire)+2)
	bufs = append(bufs, batchControl(unix.NFNL_MSG_BATCH_BEGIN, 1))
	size = 2 * len(bufs[0])
	for _, s := range b.wire {
		bufs = append(bufs, s)
		size += len(s)
	}
	bufs = append(bufs, batchControl(unix.NFNL_MSG_BATCH_END, uint32(len(b.msgs)+2)))
	return bufs, size
}

// batchControl is a batch begin or end message.
func batchControl(typ uint16, seq uint32) []byte {
	h := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(h[0:], uint32(len(h)))
	binary.NativeEndian.PutUint16(h[4:], typ)
	binary.NativeEndian.PutUint16(h[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(h[8:], seq)
	copy(h[unix.NLMSG_HDRLEN:], []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES})
	return h
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

// encodeBatch lays out begin, msgs and end with sequence numbers from seq
// on; only the last of msgs asks for an acknowledgement. first and last
// are the sequence numbers of the begin message and of the last of msgs.
func encodeBatch(msgs []netlink.Message, seq uint32) (buf []byte, first, last uint32) {
	batchHdr := []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES}
	aligned := func(n int) int { return (n + 3) &^ 3 }
	size := 2 * aligned(unix.NLMSG_HDRLEN+len(batchHdr))
	for _, m := range msgs {
		size += aligned(unix.NLMSG_HDRLEN + len(m.Data))
	}
	// One allocation of the batch's size: a batch of a cold start's chunk
	// is tens of MiB, and growing it by appends held twice that.
	buf = make([]byte, 0, size)
	put := func(typ uint16, flags uint16, seq uint32, data []byte) {
		n := unix.NLMSG_HDRLEN + len(data)
		h := buf[len(buf) : len(buf)+aligned(n)]
		binary.NativeEndian.PutUint32(h[0:], uint32(n))
		binary.NativeEndian.PutUint16(h[4:], typ)
		binary.NativeEndian.PutUint16(h[6:], flags)
		binary.NativeEndian.PutUint32(h[8:], seq)
		binary.NativeEndian.PutUint32(h[12:], 0) // port id
		copy(h[unix.NLMSG_HDRLEN:], data)
		clear(h[n:])
		buf = buf[:len(buf)+len(h)]
	}
	first = seq
	put(unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, seq, batchHdr)
	for i, m := range msgs {
		seq++
		flags := uint16(m.Header.Flags)
		if i == len(msgs)-1 {
			flags |= unix.NLM_F_ACK
		}
		put(uint16(m.Header.Type), flags, seq, m.Data)
	}
	last = seq
	seq++
	put(unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, seq, batchHdr)
	return buf, first, last
}

// readBatchReplies reads the kernel's replies: an error for each refused
// message and the acknowledgement of the last one, or one error for the
// batch as a whole (a failed commit, no permission), whose sequence
// number is the begin message's.
func readBatchReplies(fd int, msgs []netlink.Message, first, last uint32) error {
	var firstErr error
	rb := make([]byte, 256<<10)
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
				be := &BatchError{Index: int(seq-first) - 1, Errno: unix.Errno(-e)}
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
