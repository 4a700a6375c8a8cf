//go:build linux

package svcproxy_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/winkernel"
)

// methods lists the exported methods of t with their signatures.
func methods(t reflect.Type) []string {
	var out []string
	for i := range t.NumMethod() {
		m := t.Method(i)
		out = append(out, m.Name+" "+m.Type.String()[len("func("+t.String()):])
	}
	slices.Sort(out)
	return out
}

// TestOneEngineSurface: every engine's Proxier shows exactly the engine
// base's exported methods (the Provider handlers, Sync, Run, DryRun,
// Cleanup, Close, Stats, ...), with the same signatures, and none of the
// change tracker's.
func TestOneEngineSurface(t *testing.T) {
	want := methods(reflect.TypeFor[*engine.Base]())
	for _, name := range []string{"Update", "Synced", "Pending"} {
		if slices.ContainsFunc(want, func(m string) bool { return m == name || len(m) > len(name) && m[:len(name)+1] == name+" " }) {
			t.Errorf("the engine base exports the tracker method %s", name)
		}
	}
	for name, typ := range map[string]reflect.Type{
		"iptables":  reflect.TypeFor[*iptables.Proxier](),
		"ipvs":      reflect.TypeFor[*ipvs.Proxier](),
		"nftables":  reflect.TypeFor[*nftables.Proxier](),
		"userspace": reflect.TypeFor[*userspace.Proxier](),
		"winkernel": reflect.TypeFor[*winkernel.Proxier](),
	} {
		if !typ.Implements(reflect.TypeFor[proxy.Provider]()) {
			t.Errorf("%s.Proxier is not a proxy.Provider", name)
		}
		if got := methods(typ); !slices.Equal(got, want) {
			t.Errorf("%s.Proxier's exported methods differ from engine.Base's:\n got %v\nwant %v", name, got, want)
		}
	}
}
