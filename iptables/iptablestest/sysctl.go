package iptablestest

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Sysctl is an in-memory /proc/sys implementing iptables.Sysctl, with the
// kernel's default for the one setting the engine uses
// (iptables.SysctlRouteLocalnet = 0). Reading any other name never
// written fails with an error wrapping fs.ErrNotExist. Failures are
// injected with the proxytest.Faults verbs ("Get", "Set").
type Sysctl struct {
	proxytest.Faults
	mu     sync.Mutex
	values map[string]int
}

var _ iptables.Sysctl = (*Sysctl)(nil)

// NewSysctl returns a fake holding route_localnet = 0, then values (may
// be nil).
func NewSysctl(values map[string]int) *Sysctl {
	v := map[string]int{iptables.SysctlRouteLocalnet: 0}
	maps.Copy(v, values)
	return &Sysctl{values: v}
}

// Get implements iptables.Sysctl.
func (f *Sysctl) Get(name string) (int, error) {
	if err := f.Hit("Get"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return 0, fmt.Errorf("iptablestest: sysctl %s: %w", name, fs.ErrNotExist)
	}
	return v, nil
}

// Set implements iptables.Sysctl.
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

// routeLocalnet reports the fake's route_localnet (for the Tracer).
func (f *Sysctl) routeLocalnet() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.values[iptables.SysctlRouteLocalnet] != 0
}
