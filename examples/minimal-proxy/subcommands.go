package main

import (
	"context"
	"fmt"
	"io"
)

// The subcommands: tools for looking at a node, apart from kube-proxy's
// flags (which stay as kube-proxy has them). The first argument names
// one; anything else is a proxy run.
// (A function, not a variable: the proxy's --help lists them, and diff
// parses the proxy's flags.)
func subcommands() []subcommand {
	return []subcommand{
		{"diff", "what a sync would change on this node now, as the commands it would run (exit 3 when the node differs from the plan); takes the proxy's flags", runDiff},
		{"trace", "trace one packet through this node's current rules (iptables, nftables, ipvs, HNS on Windows or an HNS dump): backends, probabilities, masquerade, the rules that decided", runTrace},
	}
}

type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// runSubcommand runs the subcommand args[0] names; ok is false when
// args[0] is not one.
func runSubcommand(ctx context.Context, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	for _, sc := range subcommands() {
		if args[0] == sc.name {
			return sc.run(ctx, args[1:], stdout, stderr), true
		}
	}
	return 0, false
}

// writeSubcommandsUsage lists the subcommands for --help, apart from
// kube-proxy's flags.
func writeSubcommandsUsage(w io.Writer) {
	fmt.Fprintf(w, "Subcommands (not kube-proxy's; each has its own --help):\n")
	for _, sc := range subcommands() {
		fmt.Fprintf(w, "  %-8s %s\n", sc.name, sc.summary)
	}
}
