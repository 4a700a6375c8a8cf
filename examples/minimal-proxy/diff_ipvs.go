package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

// ipvsStateReader reads one family's IPVS state (virtual and real
// servers, ipsets, the addresses of kube-ipvs0) and iptables rules from
// the node, read-only.
type ipvsStateReader func(ctx context.Context, family v1.IPFamily) (ipvsSources, error)

// ipvsRulesMarker starts the iptables part of the ipvs engine's dry run.
const ipvsRulesMarker = "# iptables-restore --noflush\n"

// diffIPVS is the ipvs mode's diff. The engine's dry run compares its
// plan with the IPVS state it reads and prints the ops a full sync would
// run (ipvsadm, ip addr, ipset commands); diff runs it over the node's
// state, read (read) into ipvstest's fakes, so those ops are exactly what
// a sync would change on the node now. The iptables rules the plan
// restores are compared with the node's as in the iptables mode.
func diffIPVS(ctx context.Context, o *options, read ipvsStateReader, node *nodeView, log logr.Logger) ([]string, error) {
	saved := map[v1.IPFamily]string{}
	o.dryRun = true
	o.ipvsNode = func(family v1.IPFamily) (*ipvstest.Fakes, error) {
		src, err := read(ctx, family)
		if err != nil {
			return nil, err
		}
		saved[family] = src.Saved
		return loadIPVSFakes(src, family, node)
	}
	var plan bytes.Buffer
	if err := serve(ctx, o, &plan, log); err != nil {
		return nil, fmt.Errorf("building the plan: %w", err)
	}
	if mode := planMode(plan.String()); mode != modeIPVS {
		return nil, fmt.Errorf("the plan is for the %q mode, not ipvs", mode)
	}
	return diffPlanFamilies(plan.String(), func(family v1.IPFamily, text string) ([]string, error) {
		ops, rules, ok := strings.Cut(text, ipvsRulesMarker)
		if !ok {
			return nil, fmt.Errorf("the %s plan has no iptables part", family)
		}
		var cmds []string
		for _, l := range strings.Split(ops, "\n") {
			// comments: the header, and a real server found draining (the
			// deletion that follows it is a command)
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				cmds = append(cmds, l)
			}
		}
		s, ok := saved[family]
		if !ok {
			return nil, fmt.Errorf("the plan has an %s part, but the node's %s state was not read", family, family)
		}
		want := iptablestest.NewFake(family)
		if err := want.Restore(ctx, xtables.RestoreInput{Text: []byte(rules)}); err != nil {
			return nil, fmt.Errorf("reading the plan's iptables rules: %w", err)
		}
		ipt, err := diffIPTablesRules(family, want, s)
		if err != nil {
			return nil, err
		}
		return append(cmds, ipt...), nil
	})
}

// diffIPVSNode is diffIPVS over this node: IPVS, the ipsets and the
// addresses through netlink, the rules with iptables-save.
func diffIPVSNode(ctx context.Context, o *options, log logr.Logger) ([]string, error) {
	src, closeIPVS, err := openIPVSSources()
	if err != nil {
		return nil, err
	}
	defer closeIPVS()
	node, err := readNodeView(false)
	if err != nil {
		return nil, fmt.Errorf("cannot read the node's addresses: %w", err)
	}
	read := func(ctx context.Context, family v1.IPFamily) (ipvsSources, error) {
		saved, _, _, _, err := readIPTables(ctx, "", family == v1.IPv6Protocol, execTool)
		if err != nil {
			return ipvsSources{}, err
		}
		s := src
		s.Saved = saved
		return s, nil
	}
	return diffIPVS(ctx, o, read, node, log)
}
