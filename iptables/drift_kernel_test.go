//go:build linux

package iptables_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// chainExistsCounter counts the (on legacy, expensive) canary checks.
type chainExistsCounter struct {
	xtables.Runner
	calls int
}

func (c *chainExistsCounter) ChainExists(ctx context.Context, t xtables.Table, ch xtables.Chain) (bool, error) {
	c.calls++
	return c.Runner.ChainExists(ctx, t, ch)
}

// TestDriftCheckKernel: on both backends, the drift check finds a hand
// flush of the nat table (iptables -t nat -F; -X) and a deleted canary;
// on legacy it skips the canary commands while the tables are unchanged
// since our last write (table stamps), and checks again after another
// program changed a table.
func TestDriftCheckKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		t.Run(backend, func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			env := netnstest.NewEnv(t, topo)
			ctx := context.Background()
			err := netnstest.Exec(env.Node, func() error {
				real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
				if err != nil {
					t.Skipf("iptables %s backend unavailable: %v", backend, err)
				}
				ipt := &chainExistsCounter{Runner: real}
				p, err := NewProxier(conformanceConfig(topo, proxytest.Options{}), Interfaces{IPTables: ipt})
				if err != nil {
					return err
				}
				f := proxytest.NewFeeder(p)
				if err := f.Apply(proxytest.Scenarios(topo)[0].Steps[0].Objects); err != nil {
					return err
				}
				f.Synced()
				check := func(what string, want bool) {
					t.Helper()
					got, err := Drifted(ctx, p)
					if err != nil || got != want {
						t.Errorf("%s: Drifted = %v, %v; want %v", what, got, err, want)
					}
				}
				if err := p.Sync(ctx); err != nil {
					return err
				}
				_, stamped, _ := real.TableStamp(xtables.TableNAT)
				ipt.calls = 0
				check("right after a full sync", false)
				check("again", false)
				if stamped && ipt.calls != 0 {
					t.Errorf("legacy: %d canary commands over unchanged tables, want 0", ipt.calls)
				}
				if !stamped && ipt.calls == 0 {
					t.Errorf("%s: no canary command run", backend)
				}

				// Another program changes filter: checked again, no drift.
				if _, err := real.EnsureChain(ctx, xtables.TableFilter, "OTHER-SOFTWARE"); err != nil {
					return err
				}
				ipt.calls = 0
				check("after another program's change", false)
				if ipt.calls == 0 {
					t.Error("a changed table was not checked")
				}

				// A hand flush of the whole nat table.
				for _, op := range []string{"-F", "-X"} {
					if out, err := exec.Command("iptables-"+backend, "-w", "-t", "nat", op).CombinedOutput(); err != nil {
						return fmt.Errorf("iptables -t nat %s: %v: %s", op, err, out)
					}
				}
				check("after iptables -t nat -F; iptables -t nat -X", true)
				p.RequestFullSync()                 // what Run does on drift
				if err := p.Sync(ctx); err != nil { // the repair (a full sync)
					return err
				}
				check("after the repair", false)

				// A partial sync of ours keeps the stamps verified.
				p.OnServiceAdd(svc("ns", "late", "172.30.0.99"))
				if err := p.Sync(ctx); err != nil {
					return err
				}
				if st := p.Stats(); st.Last.Full || st.Last.Result.Writes == 0 {
					t.Errorf("test setup: want a partial sync that wrote, got %+v", st.Last)
				}
				ipt.calls = 0
				check("after a partial sync", false)
				if stamped && ipt.calls != 0 {
					t.Errorf("legacy: %d canary commands after our own partial sync, want 0", ipt.calls)
				}

				// Only the filter canary deleted.
				if err := real.DeleteChain(ctx, xtables.TableFilter, xtables.ChainKubeProxyCanary); err != nil {
					return err
				}
				check("after deleting the filter canary", true)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
