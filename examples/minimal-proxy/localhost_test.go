package main

import (
	"context"
	"strings"
	"testing"
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
