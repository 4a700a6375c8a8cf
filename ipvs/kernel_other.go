//go:build !linux

package ipvs

import "time"

// Options configure the real kernel interfaces (see the Linux build).
type Options struct {
	NetNSPath     string
	SocketTimeout time.Duration
}

// New fails with ErrNotSupported: IPVS exists only on Linux.
func New(opts Options) (Interface, error) { return nil, ErrNotSupported }

// NewIPSet fails with ErrNotSupported: ipset exists only on Linux.
func NewIPSet(opts Options) (IPSet, error) { return nil, ErrNotSupported }

// NewNetlink fails with ErrNotSupported: rtnetlink exists only on Linux.
func NewNetlink(opts Options) (Netlink, error) { return nil, ErrNotSupported }

// NewSysctl returns a Sysctl whose calls fail with ErrNotSupported.
func NewSysctl() Sysctl { return noSysctl{} }

type noSysctl struct{}

func (noSysctl) Get(string) (int, error) { return 0, ErrNotSupported }
func (noSysctl) Set(string, int) error   { return ErrNotSupported }
