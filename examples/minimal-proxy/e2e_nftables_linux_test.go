//go:build linux

package main

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
)

var nftablesE2EMode = e2eMode{
	name: modeNFTables,
	// The nftables mode has no flags of its own (as upstream): its first
	// run syncs no more often than the default second, the restarted one
	// reads its minimum sync period from the configuration file.
	//
	// masqueradeAll: the restarted proxy gets --masquerade-all, which the
	// binary applies to the iptables section only (flags.go), while upstream
	// kube-proxy's flag masquerades all in the nftables mode too. Until the
	// binary does the same, the file says it for the nftables section.
	config: "nftables:\n  minSyncPeriod: 100ms\n  masqueradeAll: true\n",
	quirks: nftablestest.ConformanceQuirks,
	dump:   [][]string{{"nft", "list", "ruleset"}},
	cleaned: func(t *testing.T, inNS inNamespace) {
		t.Helper()
		// Upstream kube-proxy's table name, in either family.
		if out := commandIn(t, inNS, "nft", "list", "tables"); strings.Contains(out, "kube-proxy") {
			t.Errorf("nftables tables left after --cleanup:\n%s", out)
		}
	},
}

// TestE2EKubeAPIServerNFTables is TestE2EKubeAPIServer in the nftables
// mode: the binary against a real kube-apiserver, the conformance table
// through the API (with the nftables engine's explained quirks), real
// connections, a restart over its own table, and --cleanup leaving no
// kube-proxy table in either family. It skips when nft is missing or too
// old (the binary would fall back to iptables).
func TestE2EKubeAPIServerNFTables(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	if err := probeNFTables(); err != nil {
		t.Skipf("no usable nftables here: %v", err)
	}
	t.Parallel() // beside the other modes' e2e, on control planes of their own
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			t.Parallel()
			testE2E(t, startE2ECluster(t, buildE2EBinaries(t, e2eKubeFor(family)), family), nftablesE2EMode)
		})
	}
}
