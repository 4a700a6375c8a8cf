// Package conformance is a CNI agent's kernel conformance test, written
// outside svcproxy's module: svcproxy's iptables engine, configured as the
// agent configures it, must pass svcproxy's conformance table with real
// packets, in network namespaces the test makes (root only; skipped with
// the reason otherwise).
package conformance

import (
	"net/netip"
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/kerneltest"
)

func TestMain(m *testing.M) { os.Exit(kerneltest.Main(m)) }

// agentEngine builds the engine as the agent would: its node, its pod
// CIDR as the local-traffic detector, node ports on the node IP only.
func agentEngine(t *testing.T, env *kerneltest.Env, opts proxytest.Options) proxy.Provider {
	topo := env.Topo
	var runner xtables.Runner
	if err := kerneltest.Exec(env.Node, func() error {
		var err error
		runner, err = xtables.New(xtables.RunnerConfig{Family: topo.Family})
		return err
	}); err != nil {
		t.Skipf("iptables unavailable: %v", err)
	}
	p, err := iptables.NewProxier(iptables.Config{
		Common: engine.Common{NodeName: topo.NodeName, NodeIPs: []netip.Addr{topo.NodeIP}, Conntrack: conntrack.New()},
		Netfilter: engine.Netfilter{
			MasqueradeAll:     opts.MasqueradeAll,
			LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
			NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
		},
	}, iptables.Interfaces{IPTables: runner})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestKernelConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("real-kernel conformance takes minutes; skipped with -short")
	}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			kerneltest.Run(t, family, kerneltest.Harness{New: agentEngine})
		})
	}
}
