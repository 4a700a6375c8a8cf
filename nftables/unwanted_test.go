//go:build linux

package nftables

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// onlyWantedChains answers true only when the state's chains are exactly
// the wanted ones plus static ones: anything else takes removeUnwanted's
// full walk.
func TestOnlyWantedChains(t *testing.T) {
	static := &staticPlan{chains: []chainSpec{{name: "services"}, {name: "mark-for-masquerade"}}}
	want := map[types.NamespacedName]*servicePlan{
		{Namespace: "ns", Name: "a"}: {chains: []chainSpec{{name: "service-AAAA-ns/a/tcp/p80"}, {name: "endpoint-BBBB-ns/a/tcp/p80__10.0.0.1/80"}}},
	}
	state := func(names ...string) *tableState {
		st := newTableState()
		for _, n := range names {
			st.chains[n] = "h"
		}
		return st
	}
	for _, tc := range []struct {
		name   string
		chains []string
		want   bool
	}{
		{"exactly the wanted and static ones", []string{"services", "mark-for-masquerade", "service-AAAA-ns/a/tcp/p80", "endpoint-BBBB-ns/a/tcp/p80__10.0.0.1/80"}, true},
		{"a static one missing", []string{"services", "service-AAAA-ns/a/tcp/p80", "endpoint-BBBB-ns/a/tcp/p80__10.0.0.1/80"}, true},
		{"a stale service chain", []string{"services", "mark-for-masquerade", "service-AAAA-ns/a/tcp/p80", "endpoint-BBBB-ns/a/tcp/p80__10.0.0.1/80", "endpoint-CCCC-ns/a/tcp/p80__10.0.0.2/80"}, false},
		{"a foreign chain", []string{"services", "mark-for-masquerade", "service-AAAA-ns/a/tcp/p80", "endpoint-BBBB-ns/a/tcp/p80__10.0.0.1/80", "by-hand"}, false},
		{"a wanted chain missing", []string{"services", "mark-for-masquerade", "service-AAAA-ns/a/tcp/p80", "endpoint-CCCC-ns/a/tcp/p80__10.0.0.2/80"}, false},
	} {
		if got := onlyWantedChains(state(tc.chains...), want, static); got != tc.want {
			t.Errorf("%s: onlyWantedChains = %v, want %v", tc.name, got, tc.want)
		}
	}
}
