package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// dryRunSyncTimeout bounds how long a dry run waits for the source's
// initial lists (an API server that never answers).
const dryRunSyncTimeout = time.Minute

// dryRun builds the engine over in-memory fakes, feeds it the source's
// current objects once, and prints what a sync would program. Nothing on
// the node is read or changed, so it works unprivileged and without
// iptables or IPVS installed.
func dryRun(ctx context.Context, o *options, mode, nodeName string, node *v1.Node, nodeIPs []netip.Addr, src source, stdout io.Writer, log logr.Logger) error {
	eng, err := buildEngine(ctx, engineParams{
		mode: mode, opts: o, nodeName: nodeName, nodeIPs: nodeIPs, node: node,
		log: log, dryRun: true,
	})
	if err != nil {
		return err
	}
	defer eng.close()
	ctx, cancel := context.WithTimeout(ctx, dryRunSyncTimeout)
	defer cancel()
	if err := src.load(ctx, eng.proxier); err != nil {
		return err
	}
	plan, err := eng.proxier.DryRun(ctx)
	if errors.Is(err, proxy.ErrNotSynced) {
		return fmt.Errorf("dry run: the source did not deliver its initial lists: %w", err)
	}
	if err != nil {
		return fmt.Errorf("dry run: %w", err)
	}
	fmt.Fprintf(stdout, "# minimal-proxy dry run: mode %s, node %s, node IPs %v\n", eng.mode, nodeName, nodeIPs)
	fmt.Fprint(stdout, plan)
	if !strings.HasSuffix(plan, "\n") {
		fmt.Fprintln(stdout)
	}
	return nil
}
