package offheap

import (
	"runtime"
	"sync"
	"unsafe"
)

// Pool hands out buffers of one size. The zero Pool is not usable: New.
type Pool struct {
	size, keep int
	heap       bool

	mu   sync.Mutex
	warm [][]byte // free, pages resident (mapped or heap)
	cold [][]byte // free, mapped, pages given back to the kernel
	m    *mappings
	st   Stats
}

// mappings are the buffers a Pool mapped, by address; the Pool's cleanup
// unmaps them (it must not refer to the Pool).
type mappings struct{ bufs map[uintptr][]byte }

// Stats describes a Pool's buffers, in bytes.
type Stats struct {
	InUse     int64 // handed out by Get and not Put back
	PeakInUse int64 // the most InUse has been
	Resident  int64 // InUse plus the free buffers whose pages are resident
	Mapped    int64 // mapped outside the heap (resident or not)
	// Heap: buffers come from the Go heap (asked for, or mmap is not
	// available); MapErr is why, when mmap failed.
	Heap   bool
	MapErr error
}

// New returns a Pool of buffers of size bytes (a multiple of the page
// size is best) that keeps at most keep free buffers resident after Trim.
// heap makes every buffer a Go heap buffer (the switch for embedders that
// want all memory under the collector and GOMEMLIMIT).
func New(size, keep int, heap bool) *Pool {
	p := &Pool{size: size, keep: keep, heap: heap, m: &mappings{bufs: map[uintptr][]byte{}}}
	p.st.Heap = heap || !mmapSupported
	runtime.AddCleanup(p, func(m *mappings) {
		for _, b := range m.bufs {
			unmap(b)
		}
	}, p.m)
	return p
}

// Size is the capacity of every buffer.
func (p *Pool) Size() int { return p.size }

// Get returns a buffer of length 0 and capacity Size.
func (p *Pool) Get() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b []byte
	switch {
	case len(p.warm) > 0:
		b = p.warm[len(p.warm)-1]
		p.warm = p.warm[:len(p.warm)-1]
	case len(p.cold) > 0:
		b = p.cold[len(p.cold)-1]
		p.cold = p.cold[:len(p.cold)-1]
		p.st.Resident += int64(p.size)
	default:
		b = p.newBuffer()
		p.st.Resident += int64(p.size)
	}
	p.st.InUse += int64(p.size)
	p.st.PeakInUse = max(p.st.PeakInUse, p.st.InUse)
	return b[:0]
}

// newBuffer maps a buffer, or makes one on the heap when mapping is off
// or fails (the first failure is kept in Stats.MapErr; later Gets try
// again).
func (p *Pool) newBuffer() []byte {
	if !p.heap && mmapSupported {
		b, err := mapBuffer(p.size)
		if err == nil {
			p.m.bufs[addr(b)] = b
			p.st.Mapped += int64(p.size)
			return b
		}
		if p.st.MapErr == nil {
			p.st.MapErr = err
		}
		p.st.Heap = true
	}
	return make([]byte, 0, p.size)
}

// Put gives b, a buffer from Get, back to the pool; nothing may use it
// after. Buffers of another size are ignored.
func (p *Pool) Put(b []byte) {
	if cap(b) != p.size {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.InUse -= int64(p.size)
	p.warm = append(p.warm, b[:0])
}

// Trim gives back to the kernel the pages of the free buffers beyond the
// keep most recently Put (heap buffers beyond them are left to the
// collector). Call it once an operation's buffers are all back.
func (p *Pool) Trim() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.warm) <= p.keep {
		return
	}
	n := len(p.warm) - p.keep
	var stay [][]byte // mapped, but madvise failed: still resident
	for _, b := range p.warm[:n] {
		if _, mapped := p.m.bufs[addr(b)]; !mapped {
			p.st.Resident -= int64(p.size) // a heap buffer, to the collector
			continue
		}
		if release(b[:cap(b)]) != nil {
			stay = append(stay, b)
			continue
		}
		p.st.Resident -= int64(p.size)
		p.cold = append(p.cold, b)
	}
	kept := append(stay, p.warm[n:]...)
	clear(p.warm)
	p.warm = append(p.warm[:0], kept...)
}

// Stats returns the pool's figures now.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b[:1]))) }
