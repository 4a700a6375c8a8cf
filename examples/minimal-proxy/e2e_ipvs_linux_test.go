//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

var ipvsE2EMode = e2eMode{
	name:   modeIPVS,
	flags:  []string{"--ipvs-min-sync-period=100ms"},
	config: "ipvs:\n  minSyncPeriod: 100ms\n",
	quirks: ipvstest.ConformanceQuirks,
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
// restart over its own IPVS state. Where this kernel has no IPVS, the test
// runs itself, with etcd, kube-apiserver and the binary, inside a qemu
// guest whose kernel has it (hack/vmtest/run-e2e-ipvs.sh).
func TestE2EKubeAPIServerIPVS(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		runE2EIPVSInVM(t)
		return
	}
	bins := buildE2EBinaries(t)
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) { testE2E(t, bins, family, ipvsE2EMode) })
	}
}

// runE2EIPVSInVM runs TestE2EKubeAPIServerIPVS in the VM and fails when it
// fails or skips there.
func runE2EIPVSInVM(t *testing.T) {
	if testing.Short() {
		t.Skip("this kernel has no IPVS and the VM run takes minutes under TCG; skipped with -short")
	}
	for _, tool := range []string{"apt-get", "dpkg", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("this kernel has no IPVS, and the VM runner needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	budget := 35 * time.Minute
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < budget {
		budget = time.Until(d) - time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "vmtest", "run-e2e-ipvs.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SVCPROXY_VMTEST_QUIET=1")
	out, err := cmd.CombinedOutput()
	var kept []string
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "=== RUN") && !strings.Contains(line, "=== PAUSE") && !strings.Contains(line, "=== CONT") {
			kept = append(kept, line)
		}
	}
	t.Log("in the VM (kernel with IPVS):\n" + strings.Join(kept, "\n"))
	if err != nil {
		t.Fatalf("the ipvs-mode e2e in the VM: %v", err)
	}
}
