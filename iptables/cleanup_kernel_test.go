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
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestCleanupKernel: Cleanup succeeds on a node where nothing was ever
// programmed (iptables -C exits 2 there, which once made Cleanup fail),
// and after a real sync it removes every KUBE- chain and jump it made.
func TestCleanupKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			topo := proxytest.DefaultTopology(v1.IPv4Protocol)
			env := netnstest.NewEnv(t, topo)
			ctx := context.Background()
			err := netnstest.Exec(env.Node, func() error {
				ipt, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
				if err != nil {
					t.Skipf("iptables %s backend unavailable: %v", backend, err)
				}
				p, err := NewProxier(conformanceConfig(topo, proxytest.Options{}), Interfaces{IPTables: ipt})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Cleanup(ctx); err != nil {
					t.Fatalf("Cleanup on a clean node: %v", err)
				}
				f := proxytest.NewFeeder(p)
				scenarios := proxytest.Scenarios(topo)
				if err := f.Apply(scenarios[0].Steps[0].Objects); err != nil {
					t.Fatal(err)
				}
				f.Synced()
				if err := p.Sync(ctx); err != nil {
					t.Fatalf("Sync: %v", err)
				}
				if n := kubeLines(t, ipt); n == 0 {
					t.Fatal("sync programmed no KUBE- rules; the test proves nothing")
				}
				if err := p.Cleanup(ctx); err != nil {
					t.Fatalf("Cleanup after a sync: %v", err)
				}
				if n := kubeLines(t, ipt); n != 0 {
					t.Fatalf("Cleanup left %d KUBE- lines", n)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func kubeLines(t *testing.T, ipt xtables.Runner) int {
	t.Helper()
	n := 0
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle} {
		var buf bytes.Buffer
		if err := ipt.SaveInto(context.Background(), table, &buf); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, "KUBE-") && !strings.Contains(l, "KUBE-KUBELET-CANARY") {
				n++
			}
		}
	}
	return n
}
