//go:build linux

package main

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func TestChosenScenarios(t *testing.T) {
	all := proxytest.Scenarios(proxytest.DefaultTopology(v1.IPv4Protocol))
	if got := chosenScenarios(t, all); len(got) != len(all) {
		t.Errorf("unset: %d scenarios, want all %d", len(got), len(all))
	}
	t.Setenv("SVCPROXY_E2E_SCENARIOS", "^load-balancer(-source-ranges)?$")
	t.Setenv("SVCPROXY_E2E_REPEAT", "3")
	got := chosenScenarios(t, all)
	var names []string
	for _, sc := range got {
		names = append(names, sc.Name)
	}
	want := []string{"load-balancer", "load-balancer-source-ranges"}
	if len(names) != 6 {
		t.Fatalf("got %v, want %v three times", names, want)
	}
	for i, n := range names {
		if n != want[i%2] {
			t.Errorf("scenario %d is %q, want %q (%v)", i, n, want[i%2], names)
		}
	}
}
