//go:build linux

package nftables_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func kernelHarness() netnstest.KernelHarness {
	return netnstest.KernelHarness{
		New: func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
			var ifs nftables.Interfaces
			err := netnstest.Exec(env.Node, func() error {
				var err error
				ifs, err = nftkernel.NewInterfaces(env.Topo.Family)
				return err
			})
			if err != nil {
				t.Skipf("nftables unavailable: %v", err)
			}
			cfg := conformanceConfig(env.Topo, opts)
			cfg.Conntrack = conntrack.New()
			p, err := nftables.NewProxier(cfg, ifs)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Quirks: conformanceQuirks,
	}
}

// TestConformanceKernel runs the conformance table with real packets
// through real nftables, in namespaces of its own (root only).
func TestConformanceKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			netnstest.RunKernel(t, fam, kernelHarness())
		})
	}
}
