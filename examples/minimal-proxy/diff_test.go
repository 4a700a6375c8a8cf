package main

import (
	"context"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// TestDiffIPTablesPlan: the demo's plan against a node holding exactly
// it is no change; against a node with one chain edited by hand and a
// stale chain, the commands that put the chain back and delete the stale
// one.
func TestDiffIPTablesPlan(t *testing.T) {
	var plan strings.Builder
	if code := run(context.Background(), []string{"--objects-file=demo.yaml", "--dry-run"}, &plan, io.Discard); code != exitOK {
		t.Fatalf("dry run exited %d", code)
	}
	node := iptablestest.NewFake(v1.IPv4Protocol)
	if err := node.Restore(context.Background(), xtables.RestoreInput{Text: []byte(plan.String())}); err != nil {
		t.Fatal(err)
	}
	tools := func() toolRunner {
		return cannedTools(t, map[string]string{"iptables-nft-save": node.Dump(), "iptables-legacy-save": ""})
	}
	cmds, err := diffIPTablesPlan(context.Background(), plan.String(), "", tools())
	if err != nil || len(cmds) != 0 {
		t.Fatalf("diff of the plan against itself: %q %v", cmds, err)
	}
	edit := "*nat\n-F KUBE-SVC-CDGGSHYLG3RE2FKL\n:KUBE-SEP-STALE - [0:0]\nCOMMIT\n"
	if err := node.Restore(context.Background(), xtables.RestoreInput{Text: []byte(edit)}); err != nil {
		t.Fatal(err)
	}
	cmds, err = diffIPTablesPlan(context.Background(), plan.String(), "", tools())
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cmds, "\n")
	for _, want := range []string{
		"iptables -t nat -F KUBE-SVC-CDGGSHYLG3RE2FKL\n",
		`iptables -t nat -A KUBE-SVC-CDGGSHYLG3RE2FKL -m comment --comment "default/web:http -> 10.244.2.2:8080" -j KUBE-SEP-4EX2N4PG4ASNZOBF`,
		"iptables -t nat -X KUBE-SEP-STALE",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("diff lacks %q:\n%s", want, got)
		}
	}
}
