package userspace_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
)

// The exported methods of Proxier are exactly the engine base's: what is
// particular to this engine is a package-level function.
func TestProxierSurfaceIsTheBase(t *testing.T) {
	methods := func(typ reflect.Type) []string {
		var out []string
		for i := range typ.NumMethod() {
			out = append(out, typ.Method(i).Name)
		}
		slices.Sort(out)
		return out
	}
	got, want := methods(reflect.TypeFor[*userspace.Proxier]()), methods(reflect.TypeFor[*engine.Base]())
	if !slices.Equal(got, want) {
		t.Errorf("*userspace.Proxier methods %v, want *engine.Base's %v", got, want)
	}
}
