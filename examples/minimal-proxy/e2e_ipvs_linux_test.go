//go:build linux

package main

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

var ipvsE2EMode = e2eMode{
	name:   modeIPVS,
	flags:  []string{"--ipvs-min-sync-period=100ms"},
	config: "ipvs:\n  minSyncPeriod: 100ms\n",
	quirks: ipvstest.ConformanceQuirks,
	dump:   [][]string{{"ipvsadm", "-Ln"}, {"ipvsadm", "-Lnc"}, {"ipset", "list"}, {"ip", "addr"}},
	cleaned: func(t *testing.T, inNS inNamespace) {
		t.Helper()
		if out := commandIn(t, inNS, "ipvsadm", "-Ln"); strings.Contains(out, "TCP ") || strings.Contains(out, "UDP ") || strings.Contains(out, "SCTP ") {
			t.Errorf("IPVS virtual servers left after --cleanup:\n%s", out)
		}
		if out := commandIn(t, inNS, "ipset", "list", "-n"); strings.Contains(out, "KUBE-") {
			t.Errorf("ipsets left after --cleanup:\n%s", out)
		}
		if out := commandIn(t, inNS, "ip", "-o", "link", "show"); strings.Contains(out, "kube-ipvs0") {
			t.Errorf("kube-ipvs0 left after --cleanup:\n%s", out)
		}
	},
}

// TestE2EKubeAPIServerIPVS is TestE2EKubeAPIServer in the ipvs mode: the
// binary against a real kube-apiserver, the conformance table through the
// API (with the IPVS engine's explained quirks), real connections, and a
// restart over its own IPVS state. It needs a kernel with IPVS: where this
// one has none, TestIPVSInVM runs it, with etcd, kube-apiserver and the
// binary, inside a qemu guest whose kernel has it
// (hack/vmtest/run-minimal-proxy-ipvs.sh), beside TestTraceKernelIPVS.
func TestE2EKubeAPIServerIPVS(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	skipUnlessIPVS(t)
	t.Parallel() // beside the other modes' e2e, on control planes of their own
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			testE2E(t, startE2ECluster(t, buildE2EBinaries(t, e2eKubeFor(family)), family), ipvsE2EMode)
		})
	}
}
