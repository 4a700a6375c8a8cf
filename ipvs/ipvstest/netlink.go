package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Netlink is an in-memory set of links and their addresses implementing
// ipvs.Netlink. Seed the node's own links with AddLink. Safe for concurrent use.
type Netlink struct {
	proxytest.Faults
	mu    sync.Mutex
	links map[string]*fakeLink
	// changes counts calls that changed something (an Ensure call that
	// found its object does not).
	changes int
}

type fakeLink struct {
	dummy bool
	addrs []netip.Addr
}

var _ ipvs.Netlink = (*Netlink)(nil)

// NewNetlink returns a node with only "lo" (127.0.0.1, ::1).
func NewNetlink() *Netlink {
	return &Netlink{links: map[string]*fakeLink{
		"lo": {addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}},
	}}
}

// AddLink adds (or extends) a non-dummy link with addresses, e.g. the
// node's "eth0".
func (f *Netlink) AddLink(name string, addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[name]
	if l == nil {
		l = &fakeLink{}
		f.links[name] = l
	}
	for _, a := range addrs {
		if !slices.Contains(l.addrs, a.Unmap()) {
			l.addrs = append(l.addrs, a.Unmap())
		}
	}
}

// EnsureDummyDevice implements ipvs.Netlink.
func (f *Netlink) EnsureDummyDevice(name string) (bool, error) {
	if err := f.Hit("EnsureDummyDevice"); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; ok {
		return true, nil
	}
	f.links[name] = &fakeLink{dummy: true}
	f.changes++
	return false, nil
}

// DeleteDummyDevice implements ipvs.Netlink.
func (f *Netlink) DeleteDummyDevice(name string) error {
	if err := f.Hit("DeleteDummyDevice"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return fmt.Errorf("ipvstest: link %s: %w", name, ipvs.ErrNotFound)
	}
	if !l.dummy {
		return fmt.Errorf("ipvstest: link %s is not a dummy link: %w", name, ErrInvalid)
	}
	delete(f.links, name)
	f.changes++
	return nil
}

func (f *Netlink) link(dev string) (*fakeLink, error) {
	l, ok := f.links[dev]
	if !ok {
		return nil, fmt.Errorf("ipvstest: link %s: %w", dev, ipvs.ErrNotFound)
	}
	return l, nil
}

// EnsureAddressBind implements ipvs.Netlink.
func (f *Netlink) EnsureAddressBind(addr netip.Addr, dev string) (bool, error) {
	if err := f.Hit("EnsureAddressBind"); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.link(dev)
	if err != nil {
		return false, err
	}
	if !addr.IsValid() {
		return false, fmt.Errorf("ipvstest: invalid address: %w", ErrInvalid)
	}
	if slices.Contains(l.addrs, addr.Unmap()) {
		return true, nil
	}
	l.addrs = append(l.addrs, addr.Unmap())
	f.changes++
	return false, nil
}

// UnbindAddress implements ipvs.Netlink.
func (f *Netlink) UnbindAddress(addr netip.Addr, dev string) error {
	if err := f.Hit("UnbindAddress"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.link(dev)
	if err != nil {
		return err
	}
	i := slices.Index(l.addrs, addr.Unmap())
	if i < 0 {
		return fmt.Errorf("ipvstest: %s not on %s: %w", addr, dev, ipvs.ErrNotFound)
	}
	l.addrs = slices.Delete(l.addrs, i, i+1)
	f.changes++
	return nil
}

// ListBindAddresses implements ipvs.Netlink (sorted).
func (f *Netlink) ListBindAddresses(dev string) ([]netip.Addr, error) {
	if err := f.Hit("ListBindAddresses"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.link(dev)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(l.addrs)
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// LocalAddresses implements ipvs.Netlink (sorted).
func (f *Netlink) LocalAddresses(family v1.IPFamily, exceptDev string) ([]netip.Addr, error) {
	if err := f.Hit("LocalAddresses"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netip.Addr
	for name, l := range f.links {
		if name == exceptDev {
			continue
		}
		for _, a := range l.addrs {
			if a.Is4() == (family != v1.IPv6Protocol) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// IsLocal reports whether addr is on any link (what addrtype LOCAL means).
func (f *Netlink) IsLocal(addr netip.Addr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, l := range f.links {
		if slices.Contains(l.addrs, addr.Unmap()) {
			return true
		}
	}
	return false
}

// AllAddresses lists the addresses of every link (sorted).
func (f *Netlink) AllAddresses() []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netip.Addr
	for _, l := range f.links {
		out = append(out, l.addrs...)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// Mutations is the number of calls that changed links or addresses since
// the fake was made or ResetCalls (Ensure calls that found what they
// ensure are not counted).
func (f *Netlink) Mutations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes
}

// ResetCalls zeroes the call counters and Mutations.
func (f *Netlink) ResetCalls() {
	f.Faults.ResetCalls()
	f.mu.Lock()
	f.changes = 0
	f.mu.Unlock()
}

// Deletions is the number of calls that remove links or addresses.
func (f *Netlink) Deletions() int { return f.CallsOf("DeleteDummyDevice", "UnbindAddress") }

// Dump renders a link like `ip -brief addr show dev`: "kube-ipvs0 DOWN"
// then one address per line ("inet 10.96.0.1/32"), sorted. A missing link
// renders as "Device \"name\" does not exist."
func (f *Netlink) Dump(dev string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[dev]
	if !ok {
		return fmt.Sprintf("Device %q does not exist.\n", dev)
	}
	var b strings.Builder
	state := "UNKNOWN"
	if l.dummy {
		state = "DOWN"
	}
	fmt.Fprintf(&b, "%s %s\n", dev, state)
	addrs := slices.Clone(l.addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range addrs {
		fam := "inet"
		if a.Is6() {
			fam = "inet6"
		}
		fmt.Fprintf(&b, "    %s %s\n", fam, netip.PrefixFrom(a, a.BitLen()))
	}
	return b.String()
}
