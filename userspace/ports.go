package userspace

import (
	"fmt"
	"net/netip"
)

// portAllocator hands out proxy ports from a range, remembering which are
// in use by this proxier. A port another process holds is skipped when the
// bind fails; the caller reports the bind error and asks for the next.
type portAllocator struct {
	r    PortRange
	used map[int]bool
	next int
}

func newPortAllocator(r PortRange) *portAllocator {
	return &portAllocator{r: r, used: map[int]bool{}, next: r.Begin}
}

// bind tries ports of the range, starting after the last one handed out,
// until open succeeds; with the zero range it calls open(0) once.
func (a *portAllocator) bind(open func(port int) (netip.AddrPort, error)) (netip.AddrPort, error) {
	if a.r.Size() == 0 {
		return open(0)
	}
	var lastErr error
	for i := 0; i < a.r.Size(); i++ {
		port := a.next
		if a.next++; a.next > a.r.End {
			a.next = a.r.Begin
		}
		if a.used[port] {
			continue
		}
		addr, err := open(port)
		if err != nil {
			lastErr = err
			continue
		}
		a.used[port] = true
		return addr, nil
	}
	if lastErr != nil {
		return netip.AddrPort{}, fmt.Errorf("%w (%s; last bind error: %v)", ErrPortsExhausted, a.r, lastErr)
	}
	return netip.AddrPort{}, fmt.Errorf("%w (%s, all %d in use by this proxier)", ErrPortsExhausted, a.r, a.r.Size())
}

func (a *portAllocator) release(port int) {
	delete(a.used, port)
}
