package xtables_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy"
)

// An engine hooks its chains into the built-in ones with one list of jump
// rules, and matches local pod traffic with LocalMatch. The fake stands in
// for xtables.New(xtables.RunnerConfig{Backend: xtables.BackendNFT}).
func Example() {
	var ipt xtables.Runner = xtablestest.NewFake(v1.IPv4Protocol)
	ctx := context.Background()

	hooks := []xtables.JumpRule{
		{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: "MY-SERVICES", Comment: "my services"},
		{Table: xtables.TableNAT, From: xtables.ChainOutput, To: "MY-SERVICES", Comment: "my services"},
	}
	// Twice: the second call finds everything in place.
	for range 2 {
		if err := xtables.EnsureJumpRules(ctx, ipt, xtables.Prepend, hooks, nil); err != nil {
			panic(err)
		}
	}
	local := xtables.LocalMatch(proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.0.0/16")}, true)
	rules := "*nat\n-A MY-SERVICES " + strings.Join(local, " ") + " -d 10.96.0.10/32 -p tcp --dport 80 -j MARK --set-xmark 0x4000/0x4000\nCOMMIT\n"
	if err := ipt.Restore(ctx, xtables.RestoreInput{Text: []byte(rules)}); err != nil {
		panic(err)
	}
	// A refused line is a typed error.
	err := ipt.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n-A NO-SUCH-CHAIN -j ACCEPT\nCOMMIT\n")})
	var re *xtables.RestoreError
	fmt.Println(errors.Is(err, xtables.ErrRestore), errors.As(err, &re) && re.Line == 2)

	if err := xtables.DeleteJumpRules(ctx, ipt, hooks); err != nil {
		panic(err)
	}
	fmt.Print(ipt.(*xtablestest.Fake).Dump())
	// Output:
	// true true
	// *nat
	// :PREROUTING ACCEPT [0:0]
	// :INPUT ACCEPT [0:0]
	// :OUTPUT ACCEPT [0:0]
	// :POSTROUTING ACCEPT [0:0]
	// :MY-SERVICES - [0:0]
	// -A MY-SERVICES ! -s 10.244.0.0/16 -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j MARK --set-xmark 0x4000/0x4000
	// COMMIT
}
