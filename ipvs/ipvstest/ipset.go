package ipvstest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// ErrInvalid is returned by the fakes for arguments the kernel would
// reject with EINVAL.
var ErrInvalid = errors.New("ipvstest: invalid argument")

// IPSet is an in-memory ipset implementing ipvs.IPSet. Entries are checked
// against their set's type and family as the kernel does. Safe for
// concurrent use.
type IPSet struct {
	proxytest.Faults
	mu   sync.Mutex
	sets map[string]*fakeSet
}

type fakeSet struct {
	spec    ipvs.Set
	entries map[ipvs.Entry]struct{}
}

var _ ipvs.IPSet = (*IPSet)(nil)

// NewIPSet returns an empty fake.
func NewIPSet() *IPSet { return &IPSet{sets: make(map[string]*fakeSet)} }

// CreateSet implements ipvs.IPSet.
func (f *IPSet) CreateSet(set ipvs.Set) error {
	if err := f.Hit("CreateSet"); err != nil {
		return err
	}
	if set.Name == "" || len(set.Name) > 31 {
		return fmt.Errorf("ipvstest: set name %q must be 1-31 characters: %w", set.Name, ErrInvalid)
	}
	switch set.Type {
	case ipvs.HashIP, ipvs.HashIPPort, ipvs.HashIPPortIP, ipvs.HashIPPortNet, ipvs.HashNet, ipvs.BitmapPort:
	default:
		return fmt.Errorf("ipvstest: set type %q: %w", set.Type, ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sets[set.Name]; ok {
		return fmt.Errorf("ipvstest: set %s: %w", set.Name, ipvs.ErrExists)
	}
	if set.Family == "" {
		set.Family = v1.IPv4Protocol
	}
	f.sets[set.Name] = &fakeSet{spec: set, entries: make(map[ipvs.Entry]struct{})}
	return nil
}

func (f *IPSet) get(name string) (*fakeSet, error) {
	s, ok := f.sets[name]
	if !ok {
		return nil, fmt.Errorf("ipvstest: set %s: %w", name, ipvs.ErrNotFound)
	}
	return s, nil
}

// DestroySet implements ipvs.IPSet.
func (f *IPSet) DestroySet(name string) error {
	if err := f.Hit("DestroySet"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(name); err != nil {
		return err
	}
	delete(f.sets, name)
	return nil
}

// FlushSet implements ipvs.IPSet.
func (f *IPSet) FlushSet(name string) error {
	if err := f.Hit("FlushSet"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(name)
	if err != nil {
		return err
	}
	clear(s.entries)
	return nil
}

// ListSets implements ipvs.IPSet (sorted by name).
func (f *IPSet) ListSets() ([]ipvs.Set, error) {
	if err := f.Hit("ListSets"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]ipvs.Set, 0, len(f.sets))
	for _, s := range f.sets {
		out = append(out, s.spec)
	}
	slices.SortFunc(out, func(a, b ipvs.Set) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func canonical(t ipvs.SetType, e ipvs.Entry) ipvs.Entry {
	c := ipvs.Entry{}
	switch t {
	case ipvs.HashIP:
		c.IP = e.IP.Unmap()
	case ipvs.HashIPPort:
		c.IP, c.Protocol, c.Port = e.IP.Unmap(), e.Protocol, e.Port
	case ipvs.HashIPPortIP:
		c.IP, c.Protocol, c.Port, c.IP2 = e.IP.Unmap(), e.Protocol, e.Port, e.IP2.Unmap()
	case ipvs.HashIPPortNet:
		c.IP, c.Protocol, c.Port, c.Net = e.IP.Unmap(), e.Protocol, e.Port, e.Net.Masked()
	case ipvs.HashNet:
		c.Net = e.Net.Masked()
	case ipvs.BitmapPort:
		c.Port = e.Port
	}
	return c
}

// AddEntry implements ipvs.IPSet.
func (f *IPSet) AddEntry(set string, e ipvs.Entry) error {
	if err := f.Hit("AddEntry"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(set)
	if err != nil {
		return err
	}
	if err := e.Valid(s.spec.Type, s.spec.Family); err != nil {
		return fmt.Errorf("ipvstest: %v: %w", err, ErrInvalid)
	}
	c := canonical(s.spec.Type, e)
	if _, ok := s.entries[c]; ok {
		return fmt.Errorf("ipvstest: %s already in %s: %w", c.Render(s.spec.Type), set, ipvs.ErrExists)
	}
	s.entries[c] = struct{}{}
	return nil
}

// DelEntry implements ipvs.IPSet.
func (f *IPSet) DelEntry(set string, e ipvs.Entry) error {
	if err := f.Hit("DelEntry"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(set)
	if err != nil {
		return err
	}
	c := canonical(s.spec.Type, e)
	if _, ok := s.entries[c]; !ok {
		return fmt.Errorf("ipvstest: %s not in %s: %w", c.Render(s.spec.Type), set, ipvs.ErrNotFound)
	}
	delete(s.entries, c)
	return nil
}

// ListEntries implements ipvs.IPSet (sorted by rendering).
func (f *IPSet) ListEntries(set string) ([]ipvs.Entry, error) {
	if err := f.Hit("ListEntries"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.get(set)
	if err != nil {
		return nil, err
	}
	return sortedEntries(s), nil
}

func sortedEntries(s *fakeSet) []ipvs.Entry {
	out := make([]ipvs.Entry, 0, len(s.entries))
	for e := range s.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, compareEntries)
	return out
}

// Has reports whether set holds e.
func (f *IPSet) Has(set string, e ipvs.Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sets[set]
	if !ok {
		return false
	}
	_, ok = s.entries[canonical(s.spec.Type, e)]
	return ok
}

// Match answers "-m set --match-set set flags" for a packet: addrs and
// ports hold, per flag, the packet's address and port in that direction.
// It is what xtablestest.TracerConfig.IPSetMatch needs.
func (f *IPSet) Match(set string, proto v1.Protocol, addrs []netip.Addr, ports []int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sets[set]
	if !ok {
		return false, fmt.Errorf("ipvstest: set %s: %w", set, ipvs.ErrNotFound)
	}
	need := map[ipvs.SetType]int{ipvs.HashIP: 1, ipvs.HashNet: 1, ipvs.BitmapPort: 1, ipvs.HashIPPort: 2, ipvs.HashIPPortIP: 3, ipvs.HashIPPortNet: 3}[s.spec.Type]
	if len(addrs) < need || len(ports) < need {
		return false, fmt.Errorf("ipvstest: set %s of type %s needs %d match flags, got %d: %w", set, s.spec.Type, need, len(addrs), ErrInvalid)
	}
	port := func(i int) uint16 { return uint16(ports[i]) }
	switch s.spec.Type {
	case ipvs.HashIP:
		_, ok = s.entries[ipvs.Entry{IP: addrs[0].Unmap()}]
	case ipvs.BitmapPort:
		_, ok = s.entries[ipvs.Entry{Port: port(0)}]
	case ipvs.HashIPPort:
		_, ok = s.entries[ipvs.Entry{IP: addrs[0].Unmap(), Protocol: proto, Port: port(1)}]
	case ipvs.HashIPPortIP:
		_, ok = s.entries[ipvs.Entry{IP: addrs[0].Unmap(), Protocol: proto, Port: port(1), IP2: addrs[2].Unmap()}]
	case ipvs.HashNet:
		ok = false
		for e := range s.entries {
			if e.Net.Contains(addrs[0].Unmap()) {
				ok = true
				break
			}
		}
	case ipvs.HashIPPortNet:
		ok = false
		for e := range s.entries {
			if e.IP == addrs[0].Unmap() && e.Protocol == proto && e.Port == port(1) && e.Net.Contains(addrs[2].Unmap()) {
				ok = true
				break
			}
		}
	}
	return ok, nil
}

// Mutations is the number of calls that change sets.
func (f *IPSet) Mutations() int {
	return f.CallsOf("CreateSet", "DestroySet", "FlushSet", "AddEntry", "DelEntry")
}

// Deletions is the number of calls that remove sets or entries.
func (f *IPSet) Deletions() int { return f.CallsOf("DestroySet", "FlushSet", "DelEntry") }

// Dump renders every set like `ipset list` (sets by name, members sorted;
// the header lines that depend on kernel memory are left out).
func (f *IPSet) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.sets))
	for n := range f.sets {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		s := f.sets[n]
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "Name: %s\nType: %s\n", n, s.spec.Type)
		if s.spec.Type == ipvs.BitmapPort {
			b.WriteString("Header: range 0-65535\n")
		} else if s.spec.Family == v1.IPv6Protocol {
			b.WriteString("Header: family inet6\n")
		} else {
			b.WriteString("Header: family inet\n")
		}
		fmt.Fprintf(&b, "Number of entries: %d\nMembers:\n", len(s.entries))
		for _, e := range sortedEntries(s) {
			b.WriteString(e.Render(s.spec.Type))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// compareEntries orders entries by address, protocol, port, second address
// and net (cheap: no rendering).
func compareEntries(a, b ipvs.Entry) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Protocol), string(b.Protocol)); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	if c := a.IP2.Compare(b.IP2); c != 0 {
		return c
	}
	if c := a.Net.Addr().Compare(b.Net.Addr()); c != 0 {
		return c
	}
	return a.Net.Bits() - b.Net.Bits()
}
