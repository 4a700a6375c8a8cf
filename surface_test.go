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

// TestSharedConfigOnce: every engine's Config embeds engine.Common, the
// Configs of the engines that write netfilter rules embed engine.Netfilter
// (and only those), and no Config declares a field of its own that one of
// them holds, or that all three netfilter engines declare alike: each
// shared field exists once, validated and defaulted once.
func TestSharedConfigOnce(t *testing.T) {
	common, netfilter := reflect.TypeFor[engine.Common](), reflect.TypeFor[engine.Netfilter]()
	fieldNames := func(typ reflect.Type) map[string]bool {
		names := map[string]bool{}
		for i := range typ.NumField() {
			names[typ.Field(i).Name] = true
		}
		return names
	}
	shared := fieldNames(common)
	for n := range fieldNames(netfilter) {
		shared[n] = true
	}
	ownFields := map[string]map[string]reflect.Type{} // netfilter engines' own fields
	for name, tc := range map[string]struct {
		typ       reflect.Type
		netfilter bool
	}{
		"iptables":  {reflect.TypeFor[iptables.Config](), true},
		"ipvs":      {reflect.TypeFor[ipvs.Config](), true},
		"nftables":  {reflect.TypeFor[nftables.Config](), true},
		"userspace": {reflect.TypeFor[userspace.Config](), false},
		"winkernel": {reflect.TypeFor[winkernel.Config](), false},
	} {
		embeds := func(e reflect.Type) bool {
			f, ok := tc.typ.FieldByName(e.Name())
			return ok && f.Anonymous && f.Type == e
		}
		if !embeds(common) {
			t.Errorf("%s.Config does not embed engine.Common", name)
		}
		if embeds(netfilter) != tc.netfilter {
			t.Errorf("%s.Config embeds engine.Netfilter: %v, want %v", name, !tc.netfilter, tc.netfilter)
		}
		own := map[string]reflect.Type{}
		for i := range tc.typ.NumField() {
			f := tc.typ.Field(i)
			if f.Anonymous {
				continue
			}
			if shared[f.Name] {
				t.Errorf("%s.Config declares %s, a field of engine.Common or engine.Netfilter", name, f.Name)
			}
			own[f.Name] = f.Type
		}
		if tc.netfilter {
			ownFields[name] = own
		}
	}
	for f, typ := range ownFields["iptables"] {
		if ownFields["ipvs"][f] == typ && ownFields["nftables"][f] == typ {
			t.Errorf("iptables, ipvs and nftables each declare %s %v: one copy belongs in engine.Netfilter", f, typ)
		}
	}
}
