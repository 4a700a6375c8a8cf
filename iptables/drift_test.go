package iptables_test

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// The drift check runs canary commands only for tables changed since the
// engine last wrote or verified them (the Fake stamps its tables as the
// legacy runner does): none over our own syncs, some after another
// program's change, including one made just before our partial sync.
func TestDriftCheckSkipsUnchangedTables(t *testing.T) {
	ctx := context.Background()
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1"))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	mustSync(t, p)
	check := func(what string, want bool, wantCommands bool) {
		t.Helper()
		fake.ResetCalls()
		got, err := Drifted(ctx, p)
		if err != nil || got != want {
			t.Fatalf("%s: Drifted = %v, %v; want %v", what, got, err, want)
		}
		if n := fake.CallsOf("ChainExists"); (n > 0) != wantCommands {
			t.Errorf("%s: %d canary commands, want any: %v", what, n, wantCommands)
		}
	}
	check("after the first sync", false, false)

	if _, err := fake.EnsureChain(ctx, xtables.TableFilter, "OTHER-SOFTWARE"); err != nil {
		t.Fatal(err)
	}
	check("after another program's change", false, true)
	check("once verified", false, false)

	p.OnServiceAdd(svc("ns", "b", "172.30.0.2"))
	mustSync(t, p)
	check("after our partial sync", false, false)

	if _, err := fake.EnsureChain(ctx, xtables.TableNAT, "OTHER-SOFTWARE"); err != nil {
		t.Fatal(err)
	}
	p.OnServiceAdd(svc("ns", "c", "172.30.0.3"))
	mustSync(t, p)
	check("after another program's change, then our partial sync", false, true)

	if err := fake.DeleteChain(ctx, xtables.TableNAT, xtables.ChainKubeProxyCanary); err != nil {
		t.Fatal(err)
	}
	check("after the nat canary was deleted", true, true)
}
