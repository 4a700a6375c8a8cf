//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/nftables"
)

// TestNFTablesVersionGate runs the binary (root, in a namespace of its own)
// with --proxy-mode=nftables on demo.yaml. On a host below the nftables
// mode's versions (kernel 5.13 and nft 1.0.1, nftables.CheckHostVersions)
// it runs the iptables mode and says why in exactly one log line naming the
// requirement; on a host that meets them it runs the nftables mode.
// SVCPROXY_EXPECT_NFTABLES=refused or accepted (hack/matrix.sh sets it for
// each Debian suite) states the outcome the host must give, so that a
// misread version fails instead of taking the other branch.
func TestNFTablesVersionGate(t *testing.T) {
	skipUnlessRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft binary")
	}
	gateErr := nftables.CheckHostVersions()
	var refusal *nftables.VersionError
	refused := errors.As(gateErr, &refusal)
	if gateErr != nil && !refused {
		t.Fatalf("cannot read this host's versions: %v", gateErr)
	}
	switch expect := os.Getenv("SVCPROXY_EXPECT_NFTABLES"); expect {
	case "":
	case "refused", "accepted":
		if refused != (expect == "refused") {
			t.Fatalf("SVCPROXY_EXPECT_NFTABLES=%s, but the version check gave %v", expect, gateErr)
		}
	default:
		t.Fatalf("SVCPROXY_EXPECT_NFTABLES=%q: want refused or accepted", expect)
	}
	want := modeNFTables
	if refused {
		want = modeIPTables
		t.Logf("refused as expected: %v", gateErr)
	}
	_, inNS := newNamespace(t)
	p := &proxyProcess{inNS: inNS, healthz: "127.0.0.1:10256", metrics: "127.0.0.1:10249"}
	p.logPath = filepath.Join(t.TempDir(), "proxy.log")
	p.process = startProcess(t, inNS, "minimal-proxy", p.logPath, buildProxyBinary(t),
		"--objects-file=demo.yaml", "--proxy-mode="+modeNFTables,
		"--healthz-bind-address="+p.healthz, "--metrics-bind-address="+p.metrics)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", tail(readFile(p.logPath), 30))
		}
	})
	p.waitHealthy(t)
	if code, body, err := p.get(p.metrics, "/proxyMode"); err != nil || code != 200 || body != want {
		t.Errorf("/proxyMode = %d %q %v, want %q", code, body, err, want)
	}
	var fallback []string
	for _, l := range strings.Split(readFile(p.logPath), "\n") {
		if strings.Contains(l, "nftables") && strings.Contains(l, "falling back") {
			fallback = append(fallback, l)
		}
	}
	switch {
	case !refused && len(fallback) != 0:
		t.Errorf("fell back although the versions are met:\n%s", strings.Join(fallback, "\n"))
	case refused && len(fallback) != 1:
		t.Errorf("want exactly one log line on the fallback, got %d:\n%s", len(fallback), strings.Join(fallback, "\n"))
	case refused && !strings.Contains(fallback[0], "needs "+refusal.Component+" "+refusal.Need+" or later"):
		t.Errorf("the fallback line does not name the requirement (%s %s): %s", refusal.Component, refusal.Need, fallback[0])
	}
	p.stop(t)
}
