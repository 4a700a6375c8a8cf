//go:build linux

package iptables_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func kernelHarness(backend string) netnstest.KernelHarness {
	return netnstest.KernelHarness{
		New: func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
			var ipt xtables.Runner
			err := netnstest.Exec(env.Node, func() error {
				var err error
				ipt, err = xtables.New(xtables.RunnerConfig{Family: env.Topo.Family, Backend: backend})
				return err
			})
			if err != nil {
				t.Skipf("iptables %s backend unavailable: %v", backend, err)
			}
			cfg := conformanceConfig(env.Topo, opts)
			cfg.Conntrack = conntrack.New()
			p, err := NewProxier(cfg, Interfaces{IPTables: ipt})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
}

// TestConformanceKernel runs the conformance table with real packets in
// namespaces of its own (root only), for both iptables backends.
func TestConformanceKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			t.Run(backend+"/"+string(fam), func(t *testing.T) {
				netnstest.RunKernel(t, fam, kernelHarness(backend))
			})
		}
	}
}
