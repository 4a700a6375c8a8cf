//go:build linux

package ipvs_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func kernelConformanceHarness(topo proxytest.Topology) netnstest.KernelHarness {
	return netnstest.KernelHarness{
		Quirks: ipvstest.ConformanceQuirks(topo),
		New: func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
			var ifs ipvs.Interfaces
			err := netnstest.Exec(env.Node, func() error {
				var err error
				ifs, err = ipvskernel.NewInterfaces(ipvskernel.InterfacesOptions{Family: env.Topo.Family})
				return err // Sync runs inside the node namespace, where Sysctl and iptables act
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ifs.IPVS.Close() })
			p, err := ipvs.NewProxier(ipvs.Config{
				Common: engine.Common{IPFamily: env.Topo.Family, NodeName: env.Topo.NodeName, Conntrack: conntrack.New()},
				Netfilter: engine.Netfilter{
					MasqueradeAll: opts.MasqueradeAll,
					LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: env.Topo.ClusterCIDR},
				},
			}, ifs)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
	}
}

// TestKernelConformance runs the conformance table with real packets
// through real IPVS (in the VM: hack/vmtest/run-ipvs-tests.sh).
func TestKernelConformance(t *testing.T) {
	skipUnlessKernel(t)
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			netnstest.RunKernel(t, fam, kernelConformanceHarness(proxytest.DefaultTopology(fam)))
		})
	}
}
