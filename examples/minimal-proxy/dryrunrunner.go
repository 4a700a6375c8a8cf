package main

import (
	"bytes"
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
)

// errDryRun is returned by dryRunRunner for anything that would change the node.
var errDryRun = errors.New("dry run: not changing the node")

// dryRunRunner is the iptables.Runner of a dry run: it reports an empty
// node and refuses every change, so a dry run can never touch the node
// even if an engine tried to apply instead of plan.
type dryRunRunner struct{ family v1.IPFamily }

var _ iptables.Runner = dryRunRunner{}

func newDryRunRunner(family v1.IPFamily) dryRunRunner { return dryRunRunner{family: family} }

func (r dryRunRunner) Family() v1.IPFamily { return r.family }

// HasRandomFully: plan as for a current kernel and iptables.
func (dryRunRunner) HasRandomFully() bool { return true }

func (dryRunRunner) EnsureChain(context.Context, iptables.Table, iptables.Chain) (bool, error) {
	return false, errDryRun
}
func (dryRunRunner) FlushChain(context.Context, iptables.Table, iptables.Chain) error {
	return errDryRun
}
func (dryRunRunner) DeleteChain(context.Context, iptables.Table, iptables.Chain) error {
	return errDryRun
}
func (dryRunRunner) ChainExists(context.Context, iptables.Table, iptables.Chain) (bool, error) {
	return false, nil
}
func (dryRunRunner) EnsureRule(context.Context, iptables.RulePosition, iptables.Table, iptables.Chain, ...string) (bool, error) {
	return false, errDryRun
}
func (dryRunRunner) DeleteRule(context.Context, iptables.Table, iptables.Chain, ...string) error {
	return errDryRun
}
func (dryRunRunner) Restore(context.Context, []byte) error { return errDryRun }
func (dryRunRunner) SaveInto(context.Context, iptables.Table, *bytes.Buffer) error {
	return nil
}
