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

// --feature-gates=KubeProxyNFTablesLocalhostNodePorts=true (kube-proxy
// v1.37's alpha gate) turns on localhost node ports in the nftables plan:
// without loopback in --nodeport-addresses every protocol's are rejected
// and counted; with it, TCP is left to the userspace proxy. Off (the
// default, as in v1.37), the plan has no localhost objects; AllAlpha
// turns it on as kube-proxy's gates do.
func TestLocalhostNodePortsGateNFTables(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		want, absent []string
	}{
		{name: "default", absent: []string{"localhost-nodeport"}},
		{name: "gate off", args: []string{"--feature-gates=KubeProxyNFTablesLocalhostNodePorts=false,AllAlpha=true"}, absent: []string{"localhost-nodeport"}},
		{name: "gate on", args: []string{"--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true"},
			want: []string{"add counter ip kube-proxy localhost-nodeport-rejected-tcp", "tcp . 30080 : goto localhost-nodeport-reject-tcp",
				"ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @localhost-nodeport-reject-ports"}},
		{name: "AllAlpha", args: []string{"--feature-gates=AllAlpha=true"},
			want: []string{"tcp . 30080 : goto localhost-nodeport-reject-tcp"}},
		{name: "gate on, loopback node-port addresses", args: []string{"--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true", "--nodeport-addresses=127.0.0.0/8,0.0.0.0/0"},
			want:   []string{"add map ip kube-proxy localhost-nodeport-reject-ports", "add counter ip kube-proxy localhost-nodeport-rejected-udp"},
			absent: []string{"localhost-nodeport-rejected-tcp", "goto localhost-nodeport-reject-tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--objects-file", "demo.yaml", "--dry-run", "--proxy-mode", "nftables"}, tc.args...)
			code, out, errOut := runInProcess(t, context.Background(), args...)
			if code != exitOK {
				t.Fatalf("exit %d:\n%s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("plan lacks %q", w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("plan has %q", a)
				}
			}
			if strings.Contains(errOut, "without effect") && strings.Contains(errOut, "KubeProxyNFTablesLocalhostNodePorts") {
				t.Errorf("the gate was logged as without effect:\n%s", errOut)
			}
		})
	}
}
