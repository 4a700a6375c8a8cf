package changetracker

import (
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/go-logr/logr"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"
)

// parseIP parses an IP address the way the API server validated it: plain
// netip syntax, or the legacy "sloppy" IPv4 forms with leading zeros that
// old API servers accepted. IPv4-mapped IPv6 addresses count as IPv4.
// Addresses with an IPv6 zone are rejected.
func parseIP(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

// parsePrefix parses a CIDR (surrounding white space allowed, as API
// validation once let it through), masked to its prefix length.
func parsePrefix(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			if !p.IsValid() {
				return netip.Prefix{}, false
			}
		}
		return p.Masked(), true
	}
	_, n, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	a = a.Unmap()
	if a.Is4() && len(n.IP) == 16 && ones >= 96 {
		ones -= 96
	}
	p := netip.PrefixFrom(a, ones)
	return p.Masked(), p.IsValid()
}

// familyOf returns the family of a parsed address.
func familyOf(a netip.Addr) v1.IPFamily {
	if a.Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// reporter logs and counts input that a tracker skips as invalid. The zero
// value (quiet) does neither: used when rebuilding an object that was
// already reported once.
type reporter struct {
	log   logr.Logger
	count *atomic.Uint64
	// service, when withService is set, is logged with every message
	// (with the family), added only when there is something to log:
	// building the logger's values for every service would cost
	// allocations on every update.
	service     types.NamespacedName
	family      v1.IPFamily
	withService bool
}

func (r reporter) skip(msg string, keysAndValues ...any) {
	if r.count == nil {
		return
	}
	r.count.Add(1)
	log := r.log
	if r.withService {
		log = log.WithValues("service", r.service, "ipFamily", r.family)
	}
	log.Error(nil, msg, keysAndValues...)
}
