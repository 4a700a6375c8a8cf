//go:build linux

package iptables_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// restoreRecorder records the payloads handed to the real runner, and
// counts apart ensureBase's restores of base chains and jump rules.
type restoreRecorder struct {
	xtables.Runner
	payloads [][]byte
	base     int
}

func (r *restoreRecorder) Restore(ctx context.Context, in xtables.RestoreInput) error {
	r.note(in.Text)
	return r.Runner.Restore(ctx, in)
}

func (r *restoreRecorder) note(data []byte) {
	if isBaseRestore(data) {
		r.base++
	} else {
		r.payloads = append(r.payloads, bytes.Clone(data))
	}
}

// TestFullSyncWritesOnlyChainsThatDifferKernel: on both backends, our
// rules compare equal to what iptables-save prints of them (every golden
// state: cluster IPs, node ports, load balancers with source ranges,
// external IPs, local traffic policies, affinity, UDP, IPv6), so a
// restarted proxier over a correct ruleset restores nothing, and a chain
// flushed by hand is the only one rewritten.
func TestFullSyncWritesOnlyChainsThatDifferKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, g := range goldenStates {
			t.Run(backend+"/"+g.name, func(t *testing.T) {
				env := netnstest.NewEnv(t, proxytest.DefaultTopology(g.family))
				ctx := context.Background()
				err := netnstest.Exec(env.Node, func() error {
					real, err := xtables.New(xtables.RunnerConfig{Family: g.family, Backend: backend})
					if err != nil {
						t.Skipf("iptables %s backend unavailable: %v", backend, err)
					}
					newP := func() (*Proxier, *restoreRecorder, error) {
						rec := &restoreRecorder{Runner: real}
						p, err := NewProxier(withNode(g.cfg), Interfaces{IPTables: rec})
						if err != nil {
							return nil, nil, err
						}
						p.OnServiceSynced()
						p.OnEndpointSlicesSynced()
						g.state.load(p)
						return p, rec, p.Sync(ctx)
					}
					save := func() string {
						var b bytes.Buffer
						for _, tb := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
							if err := real.SaveInto(ctx, tb, &b); err != nil {
								t.Fatal(err)
							}
						}
						var keep []string
						for _, l := range strings.Split(b.String(), "\n") {
							if strings.HasPrefix(l, "#") {
								continue
							}
							// Built-in chains carry packet counters ("[1:136]"):
							// the namespace's own traffic (IPv6 neighbour
							// discovery, say) moves them between two saves.
							if strings.HasPrefix(l, ":") {
								if i := strings.Index(l, " ["); i >= 0 {
									l = l[:i]
								}
							}
							keep = append(keep, l)
						}
						return strings.Join(keep, "\n")
					}
					if _, rec, err := newP(); err != nil || len(rec.payloads) != 1 {
						return fmt.Errorf("first sync: %v, %d restores", err, len(rec.payloads))
					}
					want := save()
					p, rec, err := newP()
					if err != nil {
						return err
					}
					if len(rec.payloads) != 0 {
						t.Errorf("restart over a correct ruleset restored:\n%s", rec.payloads[0])
					}
					victim := ""
					for _, l := range strings.Split(want, "\n") {
						if strings.HasPrefix(l, ":KUBE-SVC-") {
							victim, _, _ = strings.Cut(l[1:], " ")
							break
						}
					}
					tool := "iptables-" + backend
					if g.family == "IPv6" {
						tool = "ip6tables-" + backend
					}
					if out, err := exec.Command(tool, "-w", "-t", "nat", "-F", victim).CombinedOutput(); err != nil {
						return fmt.Errorf("%s -F %s: %v: %s", tool, victim, err, out)
					}
					p.RequestFullSync()
					if err := p.Sync(ctx); err != nil {
						return err
					}
					if len(rec.payloads) != 1 {
						return fmt.Errorf("%d restores after a hand flush, want 1", len(rec.payloads))
					}
					if n := strings.Count(string(rec.payloads[0]), "\n:"); n != 1 || !strings.Contains(string(rec.payloads[0]), ":"+victim+" ") {
						t.Errorf("want only %s rewritten, got:\n%s", victim, rec.payloads[0])
					}
					if got := save(); got != want {
						t.Errorf("tables after the repair differ:\n%s", lineDiff(want, got))
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
