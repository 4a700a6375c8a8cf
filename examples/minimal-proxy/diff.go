package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// exitDiffers is diff's exit status when the node differs from the plan.
const exitDiffers = 3

const diffUsage = `Usage: minimal-proxy diff [the proxy's flags]

Shows what a sync would change on this node now: the plan for the
Services and EndpointSlices of the cluster (--kubeconfig, --master) or of
an objects file (--objects-file), for this node (--hostname-override) and
mode (--proxy-mode; the proxy's own flags and --config), against the
dataplane the node holds, read read-only with the standard tools. Prints
the commands a sync would run to get from one to the other, and nothing
when they are equal. The iptables mode prints iptables commands (the
built-in chains' jumps into kube-proxy's chains are not compared); the
nftables mode prints nft commands, comparing the kube-proxy tables as nft
lists them (the plan is listed from a scratch network namespace; the
elements of the dynamic affinity sets are not compared). The ipvs mode
prints the ipvsadm, ip addr and ipset commands a sync would run over the
node's IPVS table, KUBE- ipsets and kube-ipvs0 addresses (read over
netlink; a draining real server shows as its deletion once its
connections end), then iptables commands as the iptables mode does.
Exit status 0 when equal, 3 when they differ, 1 when the node or the plan
could not be read, 2 on bad flags.

`

// runDiff is the diff subcommand: it returns the exit code.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if slices.Contains(args, "-h") || slices.Contains(args, "--help") {
		fmt.Fprint(stderr, diffUsage)
		_, _ = parseOptions([]string{"--help"}, runtime.GOOS, stderr)
		return exitOK
	}
	o, err := parseOptions(args, runtime.GOOS, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy: %v\n", err)
		return exitUsage
	}
	switch o.config.Mode {
	case "", modeIPTables, modeNFTables, modeIPVS:
	default:
		fmt.Fprintf(stderr, "minimal-proxy diff: the %s mode is not compared (only iptables, nftables and ipvs)\n", o.config.Mode)
		return exitFailed
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "minimal-proxy diff: %v\n", errNotRoot)
		return exitFailed
	}
	o.dryRun = true
	log := newLogger(io.Discard, stderr, o.config.Logging)
	stdLog.set(log)
	var cmds []string
	if o.config.Mode == modeIPVS {
		// the engine's dry run over the node's IPVS state (diffIPVS)
		cmds, err = diffIPVSNode(ctx, o, log)
	} else {
		var plan bytes.Buffer
		if err := serve(ctx, o, &plan, log); err != nil {
			fmt.Fprintf(stderr, "minimal-proxy diff: building the plan: %v\n", err)
			return exitFailed
		}
		switch mode := planMode(plan.String()); mode {
		case modeNFTables:
			cmds, err = diffNFTablesPlan(ctx, plan.String(), execTool, listPlanInScratchNetns)
		case modeIPTables:
			cmds, err = diffIPTablesPlan(ctx, plan.String(), "", execTool)
		default:
			err = fmt.Errorf("the plan is for the %q mode, which is not compared", mode)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "minimal-proxy diff: %v\n", err)
		return exitFailed
	}
	for _, c := range cmds {
		fmt.Fprintln(stdout, c)
	}
	if len(cmds) > 0 {
		return exitDiffers
	}
	return exitOK
}

// planMode is the mode a dry run planned for, from its header (after any
// fallback, e.g. from nftables to iptables on an old kernel).
func planMode(plan string) string {
	_, rest, ok := strings.Cut(plan, "# minimal-proxy dry run: mode ")
	if !ok {
		return ""
	}
	mode, _, _ := strings.Cut(rest, ",")
	return strings.TrimSpace(mode)
}

// splitPlanFamilies splits a dry run's output into each family's part:
// a dual-stack plan has "# IPv4" and "# IPv6" lines; a single-stack one
// is of the family of the node IPs its header names.
func splitPlanFamilies(plan string) (map[v1.IPFamily]string, error) {
	out := map[v1.IPFamily]string{}
	var cur v1.IPFamily
	var b strings.Builder
	flush := func() {
		if cur != "" {
			out[cur] = b.String()
		}
		b.Reset()
	}
	for _, l := range strings.SplitAfter(plan, "\n") {
		switch strings.TrimSpace(l) {
		case "# IPv4":
			flush()
			cur = v1.IPv4Protocol
			continue
		case "# IPv6":
			flush()
			cur = v1.IPv6Protocol
			continue
		}
		if cur == "" && strings.HasPrefix(l, "# minimal-proxy dry run:") {
			cur = v1.IPv4Protocol
			if i := strings.Index(l, "node IPs ["); i >= 0 {
				first, _, _ := strings.Cut(strings.TrimPrefix(l[i:], "node IPs ["), " ")
				first = strings.TrimSuffix(strings.TrimSpace(first), "]")
				if a, err := netip.ParseAddr(first); err == nil && a.Is6() {
					cur = v1.IPv6Protocol
				}
			}
			continue
		}
		b.WriteString(l)
	}
	flush()
	if len(out) == 0 {
		return nil, errors.New("the dry run printed no plan")
	}
	return out, nil
}

// ownedChainPrefixes are the per-service chains a full sync deletes when
// no service needs them any more.
var ownedChainPrefixes = []string{"KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"}

// diffIPTablesPlan compares the plan (a dry run's iptables-restore input)
// with the node's rules and returns the iptables commands that would
// make the node's rules the plan's: for each chain of the plan that is
// missing or differs, the chain flushed (or created) and its rules
// appended; for each per-service chain no longer planned, its deletion.
func diffIPTablesPlan(ctx context.Context, plan, backend string, run toolRunner) ([]string, error) {
	return diffPlanFamilies(plan, func(family v1.IPFamily, text string) ([]string, error) {
		want := iptablestest.NewFake(family)
		if err := want.Restore(ctx, xtables.RestoreInput{Text: []byte(text)}); err != nil {
			return nil, fmt.Errorf("reading the plan: %w", err)
		}
		saved, _, _, _, err := readIPTables(ctx, backend, family == v1.IPv6Protocol, run)
		if err != nil {
			return nil, err
		}
		return diffIPTablesRules(family, want, saved)
	})
}

// diffPlanFamilies splits the plan into its families (IPv4 first) and
// returns what diffFamily makes of each part, in that order: the loop
// every mode's diff shares.
func diffPlanFamilies(plan string, diffFamily func(family v1.IPFamily, text string) ([]string, error)) ([]string, error) {
	parts, err := splitPlanFamilies(plan)
	if err != nil {
		return nil, err
	}
	var cmds []string
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		text, ok := parts[family]
		if !ok {
			continue
		}
		c, err := diffFamily(family, text)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c...)
	}
	return cmds, nil
}

// diffIPTablesRules returns the iptables (ip6tables) commands that make
// the rules saved (iptables-save text) want's, table by table.
func diffIPTablesRules(family v1.IPFamily, want *iptablestest.Fake, saved string) ([]string, error) {
	live, err := iptablestest.NewFakeFromDump(family, saved)
	if err != nil {
		return nil, fmt.Errorf("loading the node's rules: %w", err)
	}
	tool := "iptables"
	if family == v1.IPv6Protocol {
		tool = "ip6tables"
	}
	var cmds []string
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle} {
		cmds = append(cmds, diffIPTablesTable(tool, table, want, live)...)
	}
	return cmds, nil
}

func diffIPTablesTable(tool string, table xtables.Table, want, live *iptablestest.Fake) []string {
	planned, err := want.Chains(table)
	if err != nil {
		return nil // the plan does not touch this table
	}
	var cmds []string
	plannedSet := map[xtables.Chain]bool{}
	for _, c := range planned {
		plannedSet[c] = true
		if isBuiltinChain(c) {
			continue
		}
		wantRules, _ := want.Rules(table, c)
		liveRules, err := live.Rules(table, c)
		if err == nil && slices.Equal(wantRules, liveRules) {
			continue
		}
		if err != nil {
			cmds = append(cmds, fmt.Sprintf("%s -t %s -N %s", tool, table, c))
		} else {
			cmds = append(cmds, fmt.Sprintf("%s -t %s -F %s", tool, table, c))
		}
		for _, r := range wantRules {
			cmds = append(cmds, fmt.Sprintf("%s -t %s -A %s %s", tool, table, c, r))
		}
	}
	liveChains, err := live.Chains(table)
	if err != nil {
		return cmds
	}
	for _, c := range liveChains {
		if plannedSet[c] || !slices.ContainsFunc(ownedChainPrefixes, func(p string) bool { return strings.HasPrefix(string(c), p) }) {
			continue
		}
		cmds = append(cmds, fmt.Sprintf("%s -t %s -F %s", tool, table, c), fmt.Sprintf("%s -t %s -X %s", tool, table, c))
	}
	return cmds
}

func isBuiltinChain(c xtables.Chain) bool {
	switch c {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}
