package ipvstest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Sysctl is an in-memory /proc/sys implementing ipvs.Sysctl. Reading a
// name never written fails with ipvs.ErrNotFound unless seeded.
type Sysctl struct {
	proxytest.Faults
	mu     sync.Mutex
	values map[string]int
}

var _ ipvs.Sysctl = (*Sysctl)(nil)

// NewSysctl returns a fake seeded with values (may be nil).
func NewSysctl(values map[string]int) *Sysctl {
	v := maps.Clone(values)
	if v == nil {
		v = make(map[string]int)
	}
	return &Sysctl{values: v}
}

// Get implements ipvs.Sysctl.
func (f *Sysctl) Get(name string) (int, error) {
	if err := f.Hit("Get"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return 0, fmt.Errorf("ipvstest: sysctl %s: %w", name, ipvs.ErrNotFound)
	}
	return v, nil
}

// Set implements ipvs.Sysctl.
func (f *Sysctl) Set(name string, value int) error {
	if err := f.Hit("Set"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[name] = value
	return nil
}

// Dump renders "name = value" lines, sorted.
func (f *Sysctl) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(f.values)) {
		fmt.Fprintf(&b, "%s = %d\n", k, f.values[k])
	}
	return b.String()
}
