//go:build linux

package nftables

import (
	"context"
	"encoding/binary"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// writeEncoded writes b with w. The context it hands WriteBatch carries
// b's wire layout (the encoder's arenas, each message's header in front of
// it), which WireBatch lays out as it lies, without a copy. A writer
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

// WireBatch returns the batch a NetlinkWriter sends for msgs, laid out as
// the buffers of one datagram (size bytes in all): a batch begin with
// sequence number 1, msgs numbered 2 to len(msgs)+1 (only the last asks
// for an acknowledgement) and a batch end. When ctx is the one the engine
// handed WriteBatch with exactly these messages, the buffers are the
// encoder's arenas as they lie, with no copy (a cold start's chunk is
// tens of MiB, which a copy holds twice while it is sent); otherwise, or
// when the arenas are too many for one sendmsg, msgs copied into one
// buffer. The kernel reads the same bytes either way
// (TestWireSegmentsAreTheBatch). It sets the acknowledgement flag in the
// encoder's last header: call it once per write.
func WireBatch(ctx context.Context, msgs []netlink.Message) (bufs [][]byte, size int) {
	if b := wireOf(ctx, msgs); b != nil && len(b.wire)+2 <= maxWireSegments && len(b.lastHdr) == unix.NLMSG_HDRLEN {
		return wireBuffers(b)
	}
	buf, _, _ := encodeBatch(msgs, 1)
	return [][]byte{buf}, len(buf)
}

// maxWireSegments bounds the iovecs of one sendmsg (the kernel's
// UIO_MAXIOV is 1024); a batch in more arenas is copied (WireBatch).
const maxWireSegments = 1000

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
