//go:build linux

package iptables_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// commandCounter counts the single-rule commands that wrote something and
// the base restores, and keeps the real Runner's backend.
type commandCounter struct {
	*listCounter
	commands, base int
}

func (c *commandCounter) EnsureChain(ctx context.Context, t xtables.Table, ch xtables.Chain) (bool, error) {
	c.commands++
	return c.listCounter.EnsureChain(ctx, t, ch)
}

func (c *commandCounter) EnsureRule(ctx context.Context, pos xtables.RulePosition, t xtables.Table, ch xtables.Chain, args ...string) (bool, error) {
	c.commands++
	return c.listCounter.EnsureRule(ctx, pos, t, ch, args...)
}

func (c *commandCounter) Restore(ctx context.Context, in xtables.RestoreInput) error {
	if isBaseRestore(in.Text) {
		c.base++
	}
	return c.listCounter.Restore(ctx, in)
}

// TestKernelEnsureBaseInOneRestore: with both backends, on a node without
// our chains or with some of them (and a foreign rule in the built-in
// chains we hook into), the first sync's one base restore leaves mangle,
// nat and filter exactly as the iptables commands do, runs no command, and
// keeps the resync proof (iptables-nft: the restore's commits counted; the
// next full resync lists nothing).
func TestKernelEnsureBaseInOneRestore(t *testing.T) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, before := range []string{"empty", "partial"} {
			t.Run(backend+"/"+before, func(t *testing.T) {
				var want string
				for _, listings := range []bool{false, true} {
					netnstest.InFreshNetns(t, func() {
						real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
						if err != nil {
							t.Skipf("backend %s: %v", backend, err)
						}
						if before == "partial" {
							baseState(t, real)
						}
						cc := &commandCounter{listCounter: &listCounter{Runner: real}}
						var ipt xtables.Runner = cc
						if !listings {
							ipt = noListing{real}
						}
						p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: ipt})
						if err != nil {
							t.Fatal(err)
						}
						for i := range 5 {
							p.OnServiceAdd(benchService(i))
							p.OnEndpointSliceAdd(benchSlice(i, 0))
						}
						p.OnServiceSynced()
						p.OnEndpointSlicesSynced()
						mustSync(t, p)
						got := kernelTables(t, real)
						if !listings {
							want = got
							return
						}
						if cc.base != 1 || cc.commands != 0 {
							t.Errorf("%d base restores, %d commands; want one restore, no command", cc.base, cc.commands)
						}
						if got != want {
							t.Errorf("tables differ from the commands':\n%s", lineDiff(want, got))
						}
						cc.lists = 0
						p.RequestFullSync()
						mustSync(t, p)
						if cc.lists != 0 {
							t.Errorf("the resync after the cold start listed %d times, want none", cc.lists)
						}
					})
				}
			})
		}
	}
}

// kernelTables is mangle, nat and filter as iptables-save prints them,
// without comments and the built-in chains' counters.
func kernelTables(t *testing.T, r xtables.Runner) string {
	t.Helper()
	var b bytes.Buffer
	for _, tb := range []xtables.Table{xtables.TableMangle, xtables.TableNAT, xtables.TableFilter} {
		if err := r.SaveInto(context.Background(), tb, &b); err != nil {
			t.Fatal(err)
		}
	}
	var keep []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i >= 0 {
			l = l[:i]
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}
