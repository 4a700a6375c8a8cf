//go:build linux

package conntrack

import (
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// Netlink is the Cleaner that talks to the kernel through a netlink handle
// (of the calling thread's network namespace when Handle is nil).
type Netlink struct {
	// Handle, when set, is used instead of the package-level netlink calls
	// (e.g. a handle opened in another network namespace).
	Handle *netlink.Handle
}

// New returns a Cleaner for the current network namespace.
func New() *Netlink { return &Netlink{} }

// DeleteUDP implements Cleaner.
func (n *Netlink) DeleteUDP(ipv6 bool, filters []Filter) (uint, error) {
	if len(filters) == 0 {
		return 0, nil
	}
	nf := make([]netlink.CustomConntrackFilter, 0, len(filters))
	for _, f := range filters {
		if f.empty() {
			return 0, ErrEmptyFilter
		}
		cf := &netlink.ConntrackFilter{}
		if err := cf.AddProtocol(syscall.IPPROTO_UDP); err != nil {
			return 0, fmt.Errorf("conntrack: %s: %w", f, err)
		}
		if f.OrigDst.IsValid() {
			if err := cf.AddIP(netlink.ConntrackOrigDstIP, net.IP(f.OrigDst.Unmap().AsSlice())); err != nil {
				return 0, fmt.Errorf("conntrack: %s: %w", f, err)
			}
		}
		if f.OrigDstPort != 0 {
			if err := cf.AddPort(netlink.ConntrackOrigDstPort, uint16(f.OrigDstPort)); err != nil {
				return 0, fmt.Errorf("conntrack: %s: %w", f, err)
			}
		}
		if f.ReplySrc.IsValid() {
			if err := cf.AddIP(netlink.ConntrackReplySrcIP, net.IP(f.ReplySrc.Unmap().AsSlice())); err != nil {
				return 0, fmt.Errorf("conntrack: %s: %w", f, err)
			}
		}
		nf = append(nf, cf)
	}
	family := netlink.InetFamily(nl.FAMILY_V4)
	if ipv6 {
		family = netlink.InetFamily(nl.FAMILY_V6)
	}
	var (
		n2  uint
		err error
	)
	if n.Handle != nil {
		n2, err = n.Handle.ConntrackDeleteFilters(netlink.ConntrackTable, family, nf...)
	} else {
		n2, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, nf...)
	}
	if err != nil {
		return n2, fmt.Errorf("conntrack: deleting %d UDP filters: %w", len(nf), err)
	}
	return n2, nil
}
