//go:build linux

package nftables

import (
	"fmt"
	"testing"
)

// The self-check reads back at most selfCheckChains chains of a batch:
// one of each kind first, then the last and chains spread over the rest,
// never one twice.
func TestSelfCheckSample(t *testing.T) {
	var want []*chainSpec
	for i := range 100 {
		want = append(want, &chainSpec{name: fmt.Sprintf("service-%03d", i)})
	}
	want[40].name = "external-040"
	want[70].name = "endpoint-070"
	got := selfCheckSample(want, 4)
	var names []string
	seen := map[string]bool{}
	for _, c := range got {
		if seen[c.name] {
			t.Errorf("%s sampled twice", c.name)
		}
		seen[c.name] = true
		names = append(names, c.name)
	}
	if fmt.Sprint(names) != "[service-000 external-040 endpoint-070 service-099]" {
		t.Errorf("sample = %v", names)
	}
	if got := selfCheckSample(want[:3], 4); len(got) != 3 {
		t.Errorf("a batch of 3 chains: %d read back, want all 3", len(got))
	}
	for k := 1; k <= 10; k++ {
		if got := selfCheckSample(want[:12], k); len(got) != k {
			t.Errorf("k=%d: %d sampled", k, len(got))
		}
	}
}
