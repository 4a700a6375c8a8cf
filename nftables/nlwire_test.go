//go:build linux

package nftables

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWireSegmentsAreTheBatch: the arenas the writer sends as they are
// (writeWire), between its begin and end, are byte for byte the batch
// WriteBatch lays out from the messages (encodeBatch), across pooled
// arenas and an arena of its own for a message larger than one.
func TestWireSegmentsAreTheBatch(t *testing.T) {
	for _, n := range []int{1, 3, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := newNLEncoder(unix.NFPROTO_IPV4)
			e.pooled = true
			for i := range n {
				e.chainMsg(unix.NFT_MSG_NEWCHAIN, 0, fmt.Sprintf("service-%06d-ns/name/tcp/port", i))
				if i == n/2 {
					e.flushChain(strings.Repeat("x", arenaSize+1)) // larger than an arena
				}
				if i%7 == 0 {
					e.flushChain(fmt.Sprintf("c%d", i)) // another length
				}
			}
			b := encodedBatch{msgs: e.msgs, arenas: e.arenas, wire: e.wireSegments(), lastHdr: e.lastHdr}
			defer b.release()
			if n == 20000 && len(b.wire) < 3 {
				t.Fatalf("%d arenas, want several", len(b.wire))
			}
			want, _, _ := encodeBatch(b.msgs, 1)
			bufs, size := wireBuffers(&b)
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
