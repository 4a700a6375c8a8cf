package main

import (
	"bytes"
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// dryRunSysctl is the iptables engine's Sysctl in a dry run: it reads the
// kernel's defaults and refuses every change.
type dryRunSysctl struct{}

func (dryRunSysctl) Get(string) (int, error) { return 0, nil }
func (dryRunSysctl) Set(string, int) error   { return errDryRun }

// errDryRun is returned by dryRunRunner for anything that would change the node.
var errDryRun = errors.New("dry run: not changing the node")

// dryRunRunner is the xtables.Runner of a dry run: it reports an empty
// node and refuses every change, so a dry run can never touch the node
// even if an engine tried to apply instead of plan.
type dryRunRunner struct {
	xtables.NoKernel // nothing is written, listed at once or watched
	family           v1.IPFamily
}

var _ xtables.Runner = dryRunRunner{}

func newDryRunRunner(family v1.IPFamily) dryRunRunner { return dryRunRunner{family: family} }

func (r dryRunRunner) Family() v1.IPFamily { return r.family }

// HasRandomFully: plan as for a current kernel and iptables.
func (dryRunRunner) HasRandomFully() bool { return true }

func (dryRunRunner) EnsureChain(context.Context, xtables.Table, xtables.Chain) (bool, error) {
	return false, errDryRun
}
func (dryRunRunner) FlushChain(context.Context, xtables.Table, xtables.Chain) error {
	return errDryRun
}
func (dryRunRunner) DeleteChain(context.Context, xtables.Table, xtables.Chain) error {
	return errDryRun
}
func (dryRunRunner) ChainExists(context.Context, xtables.Table, xtables.Chain) (bool, error) {
	return false, nil
}
func (dryRunRunner) EnsureRule(context.Context, xtables.RulePosition, xtables.Table, xtables.Chain, ...string) (bool, error) {
	return false, errDryRun
}
func (dryRunRunner) DeleteRule(context.Context, xtables.Table, xtables.Chain, ...string) error {
	return errDryRun
}
func (dryRunRunner) Restore(context.Context, xtables.RestoreInput) error { return errDryRun }
func (dryRunRunner) SaveInto(context.Context, xtables.Table, *bytes.Buffer) error {
	return nil
}
