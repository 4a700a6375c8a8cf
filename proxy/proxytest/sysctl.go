package proxytest

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/proxy/sysctl"
)

// Sysctl is an in-memory /proc/sys (sysctl.Interface) for the engines'
// test kits. Reading a name never written fails with an error wrapping
// fs.ErrNotExist, as the real one. Failures are injected with the Faults
// verbs "Get" and "Set".
type Sysctl struct {
	Faults
	mu     sync.Mutex
	values map[string]int
}

var _ sysctl.Interface = (*Sysctl)(nil)

// NewSysctl returns a fake seeded with values (may be nil).
func NewSysctl(values map[string]int) *Sysctl {
	v := maps.Clone(values)
	if v == nil {
		v = make(map[string]int)
	}
	return &Sysctl{values: v}
}

// Get implements sysctl.Interface.
func (f *Sysctl) Get(name string) (int, error) {
	if err := f.Hit("Get"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return 0, fmt.Errorf("sysctl %s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

// Set implements sysctl.Interface.
func (f *Sysctl) Set(name string, value int) error {
	if err := f.Hit("Set"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[name] = value
	return nil
}

// Value reads a setting as it stands, for tracers: no fault is injected
// and no call is counted.
func (f *Sysctl) Value(name string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	return v, ok
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
