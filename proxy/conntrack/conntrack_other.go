//go:build !linux

package conntrack

// Netlink is the netlink Cleaner; on this OS every call fails.
type Netlink struct{}

// New returns a Cleaner that returns ErrNotSupported.
func New() *Netlink { return &Netlink{} }

// DeleteUDP returns ErrNotSupported.
func (n *Netlink) DeleteUDP(ipv6 bool, filters []Filter) (uint, error) {
	if len(filters) == 0 {
		return 0, nil
	}
	return 0, ErrNotSupported
}
