package userspace_test

import (
	"errors"
	"testing"

	"github.com/svcproxy/svcproxy/userspace"
)

// FuzzParsePortRange: any input either parses to a valid range that
// renders back to itself, or fails with ErrInvalidConfig.
func FuzzParsePortRange(f *testing.F) {
	for _, s := range []string{"", "30000-32767", "80", " 1 - 65535 ", "5-1", "-", "a-b", "0-0", "70000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := userspace.ParsePortRange(s)
		if err != nil {
			if !errors.Is(err, userspace.ErrInvalidConfig) {
				t.Fatalf("ParsePortRange(%q) = %v, not ErrInvalidConfig", s, err)
			}
			return
		}
		if r == (userspace.PortRange{}) {
			return
		}
		if r.Begin < 1 || r.End > 65535 || r.Begin > r.End || r.Size() != r.End-r.Begin+1 {
			t.Fatalf("ParsePortRange(%q) = invalid %+v", s, r)
		}
		again, err := userspace.ParsePortRange(r.String())
		if err != nil || again != r {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, r, r.String(), again, err)
		}
	})
}
