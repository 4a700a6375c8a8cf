package conntrack

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrNotSupported is returned on operating systems without netfilter conntrack.
var ErrNotSupported = errors.New("conntrack: not supported on this OS")

// ErrEmptyFilter is returned for a filter that would match every entry.
var ErrEmptyFilter = errors.New("conntrack: filter matches every UDP entry")

// Filter selects UDP conntrack entries; every set field must match.
type Filter struct {
	// OrigDst is the original destination (a service IP).
	OrigDst netip.Addr
	// OrigDstPort is the original destination port (a node port), 0: any.
	OrigDstPort int
	// ReplySrc is the reply source, i.e. the DNAT target (an endpoint IP).
	ReplySrc netip.Addr
}

func (f Filter) String() string {
	return fmt.Sprintf("udp orig-dst=%v orig-dport=%d reply-src=%v", f.OrigDst, f.OrigDstPort, f.ReplySrc)
}

func (f Filter) empty() bool {
	return !f.OrigDst.IsValid() && f.OrigDstPort == 0 && !f.ReplySrc.IsValid()
}

// Cleaner deletes conntrack entries of one IP family.
type Cleaner interface {
	// DeleteUDP deletes the UDP entries matching any of filters and
	// returns how many were deleted.
	DeleteUDP(ipv6 bool, filters []Filter) (uint, error)
}
