package offheap

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testSize = 64 << 10

func fill(b []byte, c byte) []byte { return append(b, bytes.Repeat([]byte{c}, cap(b))...) }

// TestGetPutTrim: the accounting of Get, Put and Trim, buffers reused
// warm first, and (where buffers are mapped) the pages of a trimmed
// buffer given back: it reads as zeros when handed out again.
func TestGetPutTrim(t *testing.T) {
	p := New(testSize, 1, false)
	var bufs [][]byte
	for i := range 3 {
		b := p.Get()
		if len(b) != 0 || cap(b) != testSize {
			t.Fatalf("Get: len %d cap %d, want 0 and %d", len(b), cap(b), testSize)
		}
		bufs = append(bufs, fill(b, byte('a'+i)))
	}
	st := p.Stats()
	if st.InUse != 3*testSize || st.PeakInUse != 3*testSize || st.Resident != 3*testSize {
		t.Fatalf("after three Gets: %+v", st)
	}
	if !st.Heap && st.Mapped != 3*testSize {
		t.Fatalf("mapped %d, want %d", st.Mapped, 3*testSize)
	}
	for _, b := range bufs {
		p.Put(b)
	}
	p.Trim()
	st = p.Stats()
	if st.InUse != 0 || st.PeakInUse != 3*testSize || st.Resident != testSize {
		t.Fatalf("after Put and Trim: %+v, want nothing in use and one buffer resident", st)
	}
	// The one kept warm is the last Put, and comes back first, as it was.
	if b := p.Get(); b[:cap(b)][0] != 'c' {
		t.Errorf("first Get after Trim holds %q, want the warm buffer", b[:1:1])
	}
	for range 2 {
		b := p.Get()
		if st.Heap {
			continue // the collector's buffers: fresh ones
		}
		if !bytes.Equal(b[:cap(b)], make([]byte, testSize)) {
			t.Errorf("a trimmed buffer still holds its bytes: its pages were not given back")
		}
	}
	if st := p.Stats(); !st.Heap && st.Mapped != 3*testSize {
		t.Errorf("trimmed buffers were mapped again: %d bytes mapped, want %d", st.Mapped, 3*testSize)
	}
}

func TestHeapPool(t *testing.T) {
	p := New(testSize, 0, true)
	b := fill(p.Get(), 'x')
	p.Put(b)
	p.Trim()
	if st := p.Stats(); !st.Heap || st.Mapped != 0 || st.InUse != 0 || st.Resident != 0 || st.MapErr != nil {
		t.Fatalf("heap pool: %+v", st)
	}
}

// TestPutOtherSize: a buffer the pool did not hand out is not taken.
func TestPutOtherSize(t *testing.T) {
	p := New(testSize, 4, false)
	p.Put(make([]byte, 0, 100))
	if st := p.Stats(); st.InUse != 0 || st.Resident != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestUnmappedOnceUnreachable: a Pool's mappings go once the Pool is
// garbage (its cleanup), and not before.
func TestUnmappedOnceUnreachable(t *testing.T) {
	if !mmapSupported {
		t.Skip("no mmap on " + runtime.GOOS)
	}
	p := New(testSize, 0, false)
	b := p.Get()
	at := addr(b)
	if p.Stats().Heap {
		t.Skip("mmap failed here: ", p.Stats().MapErr)
	}
	p.Put(b)
	b = nil
	runtime.GC()
	if !mapped(t, at) {
		t.Fatal("unmapped while the Pool is reachable")
	}
	runtime.KeepAlive(p)
	p = nil
	deadline := time.Now().Add(5 * time.Second)
	for mapped(t, at) {
		if time.Now().After(deadline) {
			t.Fatal("still mapped 5 s after the Pool became unreachable")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// mapped reports whether /proc/self/maps has a mapping holding a.
func mapped(t *testing.T, a uintptr) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		r, _, _ := strings.Cut(l, " ")
		lo, hi, ok := strings.Cut(r, "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(a) >= l && uint64(a) < h {
			return true
		}
	}
	return false
}
