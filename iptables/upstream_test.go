package iptables_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// upstreamRulesDir holds upstream kube-proxy v1.37.2's iptables rules for
// every step of the conformance table (IPv4 topology), written by
// upstream's proxier: its README says how. They live beside the reference
// binary's trace tests, which load them into a real kernel; this test
// compares them with this engine's rules.
const upstreamRulesDir = "../examples/minimal-proxy/testdata/trace/upstream-v1.37.2"

// TestRulesMatchUpstream compares, for every step of the conformance table
// (IPv4), the nat and filter rules this engine writes with those upstream
// kube-proxy v1.37.2's iptables proxier writes for the same objects and
// configuration (upstreamRulesDir). Both go through the fake's canonical
// form (what iptables-save prints), so only meaning is compared, not the
// argument order of upstream's text.
func TestRulesMatchUpstream(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, sc := range proxytest.Scenarios(topo) {
		t.Run(sc.Name, func(t *testing.T) {
			for _, st := range sc.Steps {
				path := filepath.Join(upstreamRulesDir, proxytest.StepFileName(sc.Name, st.Name)+".iptables-save")
				upstream, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				theirs := iptablestest.NewFake(v1.IPv4Protocol)
				if err := theirs.Restore(context.Background(), xtables.RestoreInput{Text: upstream}); err != nil {
					t.Fatalf("%s: %v", path, err)
				}

				cfg := conformanceConfig(topo, sc.Options)
				cfg.LocalhostNodePorts = true
				fake := iptablestest.NewFake(v1.IPv4Protocol)
				p, err := NewProxier(cfg, Interfaces{IPTables: fake, Sysctl: iptablestest.NewSysctl(nil)})
				if err != nil {
					t.Fatal(err)
				}
				feeder := proxytest.NewFeeder(p)
				if err := feeder.Apply(st.Objects); err != nil {
					t.Fatal(err)
				}
				feeder.Synced()
				mustSync(t, p)
				want, got := comparable(theirs.Dump(), true), comparable(fake.Dump(), false)
				if want != got {
					t.Errorf("step %q: rules differ from upstream v1.37.2's (- upstream, + ours):\n%s", st.Name, lineDiff(want, got))
				}
			}
		})
	}
}

// comparable is a dump reduced to what both sides write in a sync: the nat
// and filter tables (upstream's file holds only those), without the
// KUBE-PROXY-CANARY chains (kube-proxy creates them from its monitor, not
// in a sync; this engine in its base), and, on upstream's side, without
// an empty KUBE-FIREWALL and its jump rules (kube-proxy creates them in
// every full sync; this engine only when localhost node ports are served:
// doc.go). The shared dispatch chains' rule order is normalized.
func comparable(dump string, upstream bool) string {
	var keep []string
	table := ""
	firewallRules := strings.Contains(dump, "\n-A "+string(ChainKubeFirewall)+" ")
	for _, l := range strings.Split(strings.TrimSpace(dump), "\n") {
		if strings.HasPrefix(l, "*") {
			table = l[1:]
		}
		if table != "nat" && table != "filter" {
			continue
		}
		if strings.HasPrefix(l, ":KUBE-PROXY-CANARY ") {
			continue
		}
		if upstream && !firewallRules && table == "filter" &&
			(strings.HasPrefix(l, ":"+string(ChainKubeFirewall)+" ") || strings.HasSuffix(l, " -j "+string(ChainKubeFirewall))) {
			continue
		}
		keep = append(keep, l)
	}
	return normalizedDump(strings.Join(keep, "\n"))
}
