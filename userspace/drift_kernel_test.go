//go:build linux

package userspace_test

import (
	"bytes"
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
)

// nsRunner runs every iptables command inside a namespace, whichever
// goroutine calls it: Run checks for drift from a goroutine of its own,
// which does not run in the namespace Run was started in.
type nsRunner struct {
	xtables.Runner
	ns *netnstest.Namespace
}

func (r nsRunner) EnsureChain(ctx context.Context, t xtables.Table, c xtables.Chain) (existed bool, err error) {
	err = netnstest.Exec(r.ns, func() (e error) { existed, e = r.Runner.EnsureChain(ctx, t, c); return })
	return
}

func (r nsRunner) FlushChain(ctx context.Context, t xtables.Table, c xtables.Chain) error {
	return netnstest.Exec(r.ns, func() error { return r.Runner.FlushChain(ctx, t, c) })
}

func (r nsRunner) DeleteChain(ctx context.Context, t xtables.Table, c xtables.Chain) error {
	return netnstest.Exec(r.ns, func() error { return r.Runner.DeleteChain(ctx, t, c) })
}

func (r nsRunner) ChainExists(ctx context.Context, t xtables.Table, c xtables.Chain) (ok bool, err error) {
	err = netnstest.Exec(r.ns, func() (e error) { ok, e = r.Runner.ChainExists(ctx, t, c); return })
	return
}

func (r nsRunner) EnsureRule(ctx context.Context, pos xtables.RulePosition, t xtables.Table, c xtables.Chain, args ...string) (existed bool, err error) {
	err = netnstest.Exec(r.ns, func() (e error) { existed, e = r.Runner.EnsureRule(ctx, pos, t, c, args...); return })
	return
}

func (r nsRunner) DeleteRule(ctx context.Context, t xtables.Table, c xtables.Chain, args ...string) error {
	return netnstest.Exec(r.ns, func() error { return r.Runner.DeleteRule(ctx, t, c, args...) })
}

func (r nsRunner) Restore(ctx context.Context, in xtables.RestoreInput) error {
	return netnstest.Exec(r.ns, func() error { return r.Runner.Restore(ctx, in) })
}

func (r nsRunner) SaveInto(ctx context.Context, t xtables.Table, buf *bytes.Buffer) error {
	return netnstest.Exec(r.ns, func() error { return r.Runner.SaveInto(ctx, t, buf) })
}

// A hand "iptables -t nat -F" on a real kernel (in a namespace of the
// test's own) is repaired by Run within seconds (about 2s: the drift
// check's interval plus a full sync; the target is 5s), on both backends.
func TestDriftRepairKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			env := netnstest.NewEnv(t, topo)
			var runner xtables.Runner
			err := netnstest.Exec(env.Node, func() (err error) {
				runner, err = xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
				return err
			})
			if err != nil {
				t.Skipf("iptables %s backend unavailable: %v", backend, err)
			}
			ipt := nsRunner{Runner: runner, ns: env.Node}
			p, err := userspace.NewProxier(userspace.Config{
				// DriftCheckInterval: the default (2s), as in production.
				Common: engine.Common{NodeName: topo.NodeName,
					SyncPeriod: time.Hour, MinSyncPeriod: -1},
				HostIP:       topo.NodeIP,
				ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR},
			}, userspace.Interfaces{IPTables: ipt, Sockets: nsSockets{ns: env.Node}})
			if err != nil {
				t.Fatal(err)
			}
			p.OnServiceAdd(nodePortService())
			p.OnEndpointSliceAdd(webSlice("10.244.1.2"))
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- p.Run(ctx) }()
			defer func() {
				cancel()
				<-done
				if err := p.Cleanup(context.Background()); err != nil { // before Close: after it, ErrClosed
					t.Error(err)
				}
				p.Close()
			}()

			nat := func() string {
				var buf bytes.Buffer
				if err := ipt.SaveInto(context.Background(), xtables.TableNAT, &buf); err != nil {
					t.Fatal(err)
				}
				return buf.String()
			}
			const rule = "-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32"
			waitFor := func(what string) {
				t.Helper()
				for range 200 { // 10s at most
					if d := nat(); strings.Contains(d, rule) && strings.Contains(d, "-j KUBE-PORTALS-CONTAINER") {
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Fatalf("timed out waiting for %s:\n%s", what, nat())
			}
			waitFor("the first sync")
			tool := "iptables-nft"
			if backend == xtables.BackendLegacy {
				tool = "iptables-legacy"
			}
			err = netnstest.Exec(env.Node, func() error {
				out, err := exec.Command(tool, "-w", "5", "-t", "nat", "-F").CombinedOutput()
				if err != nil {
					t.Logf("%s: %s", tool, out)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(nat(), rule) {
				t.Fatal("the flush did not flush")
			}
			start := time.Now()
			waitFor("the flushed nat table to be repaired")
			t.Logf("repaired in %v", time.Since(start).Round(time.Millisecond))
		})
	}
}
