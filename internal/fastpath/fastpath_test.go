package fastpath

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	r := Range{Writer: "w", Tool: "tool", ToolMin: Version{1, 8, 9}, ToolMax: Version{1, 8, 11}, KernelMin: Version{6, 1, 0}}
	for _, tc := range []struct {
		tool, kernel string
		o            Override
		want         bool
		why          string
	}{
		{"v1.8.9 (legacy)", "6.18.0-1-amd64", Default, true, "are verified"},
		{"v1.8.11 (legacy)", "6.1.0", Default, true, "are verified"},
		{"v1.8.12", "6.18.0", Default, false, "this is 1.8.12"},
		{"v1.8.7", "6.18.0", Default, false, "this is 1.8.7"},
		{"v1.8.9", "5.10.0-30-amd64", Default, false, "this is 5.10.0"},
		{"v1.8.9", "", Default, false, "kernel version is unknown"},
		{"", "6.18", Default, false, "tool version is unknown"},
		{"v1.8.7", "5.10", On, true, "W=1"},
		{"v1.8.9", "6.18", Off, false, "W=0"},
	} {
		tool, _ := ParseVersion(tc.tool)
		kernel, _ := ParseVersion(tc.kernel)
		on, why := Decide(r, tool, kernel, tc.o, "W")
		if on != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("Decide(%q, %q, %v) = %v, %q; want %v, containing %q", tc.tool, tc.kernel, tc.o, on, why, tc.want, tc.why)
		}
	}
}

func TestEnvOverride(t *testing.T) {
	for v, want := range map[string]Override{"": Default, "0": Off, "false": Off, "1": On, "ON": On, "maybe": Default} {
		t.Setenv("SVCPROXY_TEST_FASTPATH", v)
		if got, _ := EnvOverride("SVCPROXY_TEST_FASTPATH"); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}
