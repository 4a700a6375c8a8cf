//go:build !linux

package ipvskernel

import (
	"time"

	"github.com/svcproxy/svcproxy/ipvs"
)

// Options configure the real kernel interfaces (see the Linux build).
type Options struct {
	NetNSPath     string
	SocketTimeout time.Duration
}

// New fails with ErrNotSupported: IPVS exists only on Linux.
func New(opts Options) (ipvs.Interface, error) { return nil, ipvs.ErrNotSupported }

// NewIPSet fails with ErrNotSupported: ipset exists only on Linux.
func NewIPSet(opts Options) (ipvs.IPSet, error) { return nil, ipvs.ErrNotSupported }

// NewNetlink fails with ErrNotSupported: rtnetlink exists only on Linux.
func NewNetlink(opts Options) (ipvs.Netlink, error) { return nil, ipvs.ErrNotSupported }

// NewSysctl returns a Sysctl whose calls fail with ErrNotSupported.
func NewSysctl() ipvs.Sysctl { return noSysctl{} }

type noSysctl struct{}

func (noSysctl) Get(string) (int, error) { return 0, ipvs.ErrNotSupported }
func (noSysctl) Set(string, int) error   { return ipvs.ErrNotSupported }
