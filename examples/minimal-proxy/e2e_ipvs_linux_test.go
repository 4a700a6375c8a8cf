//go:build linux

package main

import (
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/vmtest"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

var ipvsE2EMode = e2eMode{
	name:   modeIPVS,
	flags:  []string{"--ipvs-min-sync-period=100ms"},
	config: "ipvs:\n  minSyncPeriod: 100ms\n",
	quirks: ipvstest.ConformanceQuirks,
	dump:   [][]string{{"ipvsadm", "-Ln"}, {"ipvsadm", "-Lnc"}, {"ipset", "list"}, {"ip", "addr"}},
	// trace over real IPVS is checked here, against the binary's state,
	// rather than by TestTraceKernelIPVS in a guest of its own: that was
	// the conformance table with real packets under emulation once more.
	trace: "ipvs",
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
// restart over its own IPVS state; after every converged check, trace
// inside the node agrees with the real packets. Where this kernel has no
// IPVS, the test runs itself, with etcd, kube-apiserver and the binary,
// inside a qemu guest whose kernel has it (hack/vmtest/run-e2e-ipvs.sh),
// after TestTraceKernelUpstreamIPVS and TestDiffKernelIPVS in the same
// boot.
func TestE2EKubeAPIServerIPVS(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	t.Parallel() // beside the other modes' e2e: the guest is mostly one busy core
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		runE2EIPVSInVM(t)
		return
	}
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			testE2E(t, startE2ECluster(t, buildE2EBinaries(t, e2eKubeFor(family)), family), ipvsE2EMode)
		})
	}
}

// runE2EIPVSInVM runs TestE2EKubeAPIServerIPVS in the VM and fails when it
// fails or skips there.
func runE2EIPVSInVM(t *testing.T) {
	vmtest.Run(t, "the ipvs-mode e2e with trace checks, after trace over upstream's IPVS state and diff (this kernel has no IPVS)", "about ten minutes", "run-e2e-ipvs.sh", 37*time.Minute)
}
