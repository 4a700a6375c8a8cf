//go:build linux

package nftables

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestWireSegmentsAreTheBatch: the arenas WireBatch hands the writer as
// they are, between its begin and end, are byte for byte the batch it
// lays out from the messages alone (encodeBatch), across pooled arenas
// and an arena of its own for a message larger than one.
func TestWireSegmentsAreTheBatch(t *testing.T) {
	for _, n := range []int{1, 3, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newNLEncoder(unix.NFPROTO_IPV4)
			e.pool = newArenaPool(false)
			for i := range n {
				e.chainMsg(unix.NFT_MSG_NEWCHAIN, 0, fmt.Sprintf("service-%06d-ns/name/tcp/port", i))
				if i == n/2 {
					e.flushChain(strings.Repeat("x", arenaSize+1)) // larger than an arena
				}
				if i%7 == 0 {
					e.flushChain(fmt.Sprintf("c%d", i)) // another length
				}
			}
			b := encodedBatch{msgs: e.msgs, pool: e.pool, arenas: e.arenas, wire: e.wireSegments(), lastHdr: e.lastHdr}
			defer b.release()
			if n == 20000 && len(b.wire) < 3 {
				t.Fatalf("%d arenas, want several", len(b.wire))
			}
			want, _, _ := encodeBatch(b.msgs, 1)
			bufs, size := WireBatch(context.WithValue(context.Background(), wireKey{}, &b), b.msgs)
			if len(bufs) != len(b.wire)+2 {
				t.Fatalf("WireBatch laid out %d buffers, want the %d arenas between a begin and an end", len(bufs), len(b.wire))
			}
			got := bytes.Join(bufs, nil)
			if size != len(got) {
				t.Errorf("size %d, laid out %d", size, len(got))
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("the wire batch (%d bytes) differs from encodeBatch's (%d bytes) at byte %d", len(got), len(want), i)
			}
		})
	}
}

// forwardingWriter is what an embedder writes to log or count batches: it
// hands ctx and msgs on as it got them.
type forwardingWriter struct{ NetlinkWriter }

// wireSeen records whether the writer was handed the encoder's layout.
type wireSeen struct{ got *encodedBatch }

func (w *wireSeen) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	w.got = wireOf(ctx, msgs)
	return nil
}

// TestWireLayoutReachesWrappedWriter: the encoder's layout reaches the
// writer through a plain forwarding wrapper (no capability is asked of
// the writer by assertion), and not when a wrapper hands on other
// messages than the encoder's.
func TestWireLayoutReachesWrappedWriter(t *testing.T) {
	e := newNLEncoder(unix.NFPROTO_IPV4)
	e.pool = newArenaPool(false)
	for i := range 3 {
		e.chainMsg(unix.NFT_MSG_NEWCHAIN, 0, fmt.Sprintf("c%d", i))
	}
	b := encodedBatch{msgs: e.msgs, pool: e.pool, arenas: e.arenas, wire: e.wireSegments(), lastHdr: e.lastHdr}
	defer b.release()

	inner := &wireSeen{}
	if err := writeEncoded(context.Background(), forwardingWriter{inner}, &b); err != nil {
		t.Fatal(err)
	}
	if inner.got != &b {
		t.Errorf("through a forwarding wrapper the writer saw layout %p, want the batch's %p", inner.got, &b)
	}

	dropping := writerFunc(func(ctx context.Context, msgs []netlink.Message) error {
		return inner.WriteBatch(ctx, msgs[1:])
	})
	if err := writeEncoded(context.Background(), dropping, &b); err != nil {
		t.Fatal(err)
	}
	if inner.got != nil {
		t.Errorf("a wrapper that dropped a message still handed on the encoder's layout")
	}
}

type writerFunc func(ctx context.Context, msgs []netlink.Message) error

func (f writerFunc) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	return f(ctx, msgs)
}
