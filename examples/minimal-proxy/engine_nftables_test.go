//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// --proxy-mode nftables --dry-run prints the nft transaction a cold start
// would run, for each family of a dual-stack node.
func TestDryRunNFTables(t *testing.T) {
	path := writeFile(t, "objects.yaml", dualStackObjects)
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", path, "--dry-run",
		"--proxy-mode", "nftables", "--cluster-cidr", "10.244.0.0/16,fd00:244::/48")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	v4, v6, ok := strings.Cut(out, "# IPv6\n")
	if !ok || !strings.Contains(v4, "# IPv4\n") {
		t.Fatalf("dry run has no IPv4 and IPv6 sections:\n%s", out)
	}
	for _, c := range []struct{ section, want string }{
		{v4, "add table ip kube-proxy"},
		{v4, "10.96.30.1 . tcp . 80 : goto service-"},
		{v4, "dnat to 10.244.1.2:8080"},
		{v4, "ip daddr @cluster-ips ip saddr != 10.244.0.0/16 mark set mark or 0x00004000"},
		{v6, "add table ip6 kube-proxy"},
		{v6, "dnat to [fd00:244:1::2]:8080"},
		{v6, "ip6 daddr @cluster-ips ip6 saddr != fd00:244::/48 mark set mark or 0x00004000"},
	} {
		if !strings.Contains(c.section, c.want) {
			t.Errorf("section lacks %q", c.want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// nftables falls back to iptables (and on to userspace) with a log line
// when nft is missing or too old.
func TestChooseModeNFTables(t *testing.T) {
	ok := func() error { return nil }
	fail := func() error { return errors.New("nft 0.9.8 is older than 1.0.1") }
	for _, tc := range []struct {
		nft, ipt func() error
		want     string
	}{
		{ok, ok, modeNFTables},
		{fail, ok, modeIPTables},
		{fail, fail, modeUserspace},
	} {
		var logs bytes.Buffer
		got := chooseMode(modeNFTables, modeProbes{ipvs: ok, iptables: tc.ipt, nftables: tc.nft}, newLogger(&logs, &logs, LoggingConfig{}))
		if got != tc.want {
			t.Errorf("chooseMode(nftables) = %q, want %q", got, tc.want)
		}
		if got != modeNFTables && !strings.Contains(logs.String(), "Can't use the nftables proxier") {
			t.Errorf("fell back to %q without saying why: %q", got, logs.String())
		}
	}
}

// --masquerade-all is stored in iptables.masqueradeAll, as kube-proxy's
// flag table does; the nftables mode honours it too.
func TestMasqueradeAllFlagNFTables(t *testing.T) {
	code, out, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run", "--proxy-mode", "nftables", "--masquerade-all")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	// Upstream v1.37 marks all cluster-IP traffic in the services chain.
	if !strings.Contains(out, "ip daddr @cluster-ips mark set mark or 0x00004000") {
		t.Fatalf("--masquerade-all: no masquerade mark in the nftables plan:\n%.3000s", out)
	}
}
