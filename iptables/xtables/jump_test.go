package xtables_test

import (
	"testing"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// JumpRulesRestore writes, as one restore, what the listings lack, in the
// order EnsureJumpRules and EnsureChain would create it; nothing when
// nothing lacks; and refuses without a listing of every table involved.
func TestJumpRulesRestore(t *testing.T) {
	rules := []xtables.JumpRule{
		{Table: xtables.TableFilter, From: xtables.ChainForward, To: "KUBE-FORWARD", Comment: "kubernetes forwarding rules"},
		{Table: xtables.TableNAT, From: xtables.ChainOutput, To: xtables.ChainKubeServices, Comment: "kubernetes service portals"},
		{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: xtables.ChainKubeServices, Comment: "kubernetes service portals"},
		{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: "KUBE-X", Match: []string{"-m", "addrtype", "--dst-type", "LOCAL"}},
	}
	canaries := []xtables.TableChain{
		{Table: xtables.TableMangle, Chain: xtables.ChainKubeProxyCanary},
		{Table: xtables.TableNAT, Chain: xtables.ChainKubeProxyCanary},
		{Table: xtables.TableFilter, Chain: xtables.ChainKubeProxyCanary},
	}
	natListing := `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
`
	listed := map[xtables.Table]*xtables.Listing{
		xtables.TableMangle: xtables.ParseListing(nil, xtables.TableMangle),
		xtables.TableNAT:    xtables.ParseListing([]byte(natListing), xtables.TableNAT, xtables.ChainOutput, xtables.ChainPrerouting),
		xtables.TableFilter: xtables.ParseListing([]byte("*filter\n:KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n"), xtables.TableFilter, xtables.ChainForward),
	}
	data, ok := xtables.JumpRulesRestore(xtables.Prepend, rules, canaries, listed)
	want := `*filter
-N KUBE-FORWARD
-I FORWARD 1 -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
COMMIT
*nat
-I PREROUTING 1 -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-N KUBE-X
-I PREROUTING 1 -m addrtype --dst-type LOCAL -j KUBE-X
-N KUBE-PROXY-CANARY
COMMIT
*mangle
-N KUBE-PROXY-CANARY
COMMIT
`
	if !ok || string(data) != want {
		t.Errorf("JumpRulesRestore = %v,\n%s\nwant\n%s", ok, data, want)
	}
	if data, _ := xtables.JumpRulesRestore(xtables.Append, rules[:1], nil, listed); string(data) != "*filter\n-N KUBE-FORWARD\n-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\nCOMMIT\n" {
		t.Errorf("Append:\n%s", data)
	}
	// Nothing missing: no input.
	if data, ok := xtables.JumpRulesRestore(xtables.Prepend, rules[1:2], canaries[2:], listed); !ok || data != nil {
		t.Errorf("nothing missing: %v, %q", ok, data)
	}
	// A table not listed: the caller runs the commands.
	delete(listed, xtables.TableMangle)
	if _, ok := xtables.JumpRulesRestore(xtables.Prepend, rules, canaries, listed); ok {
		t.Error("ok without a listing of mangle")
	}
}
