package iptables_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
)

// noRandomFully is a Runner that says MASQUERADE --random-fully is missing
// (and accepts it all the same, being the fake underneath).
type noRandomFully struct{ *iptablestest.Fake }

func (noRandomFully) HasRandomFully() bool { return false }

// As kube-proxy v1.37, which dropped HasRandomFully from its iptables
// interface: masquerading is MASQUERADE --random-fully whatever the Runner
// says (v1.34 wrote a plain MASQUERADE when HasRandomFully was false).
func TestMasqueradeAlwaysRandomFully(t *testing.T) {
	fake := iptablestest.NewFake(v1.IPv4Protocol)
	cfg := ipv4Config
	cfg.NodeName = testNode
	p, err := NewProxier(cfg, Interfaces{IPTables: noRandomFully{fake}})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1"))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))
	mustSync(t, p)
	wantRandomFully(t, fake.Dump())
}

func wantRandomFully(t *testing.T, dump string) {
	t.Helper()
	masq := 0
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "-j MASQUERADE") {
			masq++
			if !strings.HasSuffix(l, "-j MASQUERADE --random-fully") {
				t.Errorf("masquerade rule without --random-fully: %s", l)
			}
		}
	}
	if masq == 0 {
		t.Fatalf("no MASQUERADE rule in:\n%s", dump)
	}
}
