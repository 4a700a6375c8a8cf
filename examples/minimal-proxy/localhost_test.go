package main

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
)

// --iptables-localhost-nodeports (default true, as kube-proxy) reaches the
// iptables engine: node ports on 127.0.0.0/8 with the block-localnet
// rule, or, turned off, the tail rule leaving 127.0.0.0/8 out. A mode
// that ignores it says so once when it is turned off.
func TestDryRunLocalhostNodePorts(t *testing.T) {
	const tail = `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL`
	const block = `"block incoming localnet connections"`
	for _, tc := range []struct {
		args      []string
		wantTail  string
		wantBlock bool
	}{
		{nil, tail + " -j KUBE-NODEPORTS", true},
		{[]string{"--iptables-localhost-nodeports=true"}, tail + " -j KUBE-NODEPORTS", true},
		{[]string{"--iptables-localhost-nodeports=false"}, tail + " ! -d 127.0.0.0/8 -j KUBE-NODEPORTS", false},
	} {
		args := append([]string{"--objects-file", "demo.yaml", "--dry-run"}, tc.args...)
		code, out, errOut := runInProcess(t, context.Background(), args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d:\n%s", tc.args, code, errOut)
		}
		if !strings.Contains(out, tc.wantTail+"\n") {
			t.Errorf("%v: dry run lacks %q", tc.args, tc.wantTail)
		}
		if strings.Contains(out, block) != tc.wantBlock {
			t.Errorf("%v: block-localnet rule present = %v, want %v", tc.args, !tc.wantBlock, tc.wantBlock)
		}
	}
	code, _, errOut := runInProcess(t, context.Background(), "--objects-file", "demo.yaml", "--dry-run", "--proxy-mode", "ipvs", "--iptables-localhost-nodeports=false")
	if code != exitOK {
		t.Fatalf("ipvs: exit %d:\n%s", code, errOut)
	}
	if n := strings.Count(errOut, "has no effect in this proxy mode"); n != 1 {
		t.Errorf("ipvs with --iptables-localhost-nodeports=false: %d notes, want 1:\n%s", n, errOut)
	}
}

// --init-only sets route_localnet as kube-proxy's iptables proxier does at
// construction: in the iptables mode, with localhost node ports on and
// node port addresses that let loopback in; never otherwise.
func TestInitLocalhostNodePorts(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name string
		mod  func(*KubeProxyConfiguration)
		want int
	}{
		{"defaults", func(*KubeProxyConfiguration) {}, 1},
		{"turned off", func(c *KubeProxyConfiguration) { c.IPTables.LocalhostNodePorts = &no }, 0},
		{"ipvs mode", func(c *KubeProxyConfiguration) { c.Mode = modeIPVS }, 0},
		{"node port addresses without loopback", func(c *KubeProxyConfiguration) { c.NodePortAddresses = []string{"192.168.0.0/16"} }, 0},
		{"node port addresses with loopback", func(c *KubeProxyConfiguration) { c.NodePortAddresses = []string{"127.0.0.0/8", "192.168.0.0/16"} }, 1},
	} {
		cfg := defaultConfig()
		tc.mod(cfg)
		sys := iptablestest.NewSysctl(nil)
		if err := initLocalhostNodePorts(cfg, sys, logr.Discard()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if v, _ := sys.Get(iptables.SysctlRouteLocalnet); v != tc.want {
			t.Errorf("%s: route_localnet = %d, want %d", tc.name, v, tc.want)
		}
	}
}
