package kerneltest_test

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

// agentHarness is svcproxy's iptables engine configured as a CNI agent
// would configure it for the topology: the node's name and IP, the
// cluster CIDR as the local-traffic detector, node ports on the node IP.
func agentHarness(backend string) kerneltest.Harness {
	return kerneltest.Harness{
		New: func(t *testing.T, env *kerneltest.Env, opts proxytest.Options) proxy.Provider {
			topo := env.Topo
			var runner xtables.Runner
			// The Runner probes iptables: inside the node namespace.
			err := kerneltest.Exec(env.Node, func() error {
				var err error
				runner, err = xtables.New(xtables.RunnerConfig{Family: topo.Family, Backend: backend})
				return err
			})
			if err != nil {
				t.Skipf("iptables (%s) unavailable: %v", backend, err)
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
		},
	}
}

// A CNI author's kernel conformance test: the whole table, real packets,
// svcproxy's iptables engine configured as their agent configures it.
// (An engine of their own works the same: New returns anything that is a
// proxy.Provider and programs env.Node.)
func Example() {
	_ = func(t *testing.T) {
		kerneltest.Run(t, v1.IPv4Protocol, agentHarness(xtables.BackendNFT))
	}
}

// TestRunThroughPublicKit runs a few scenarios through the public kit
// (root only; the engines' own kernel tests run the whole table).
func TestRunThroughPublicKit(t *testing.T) {
	kerneltest.SkipUnlessRoot(t)
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	var some []proxytest.Scenario
	for _, sc := range proxytest.Scenarios(topo) {
		switch sc.Name {
		case "cluster-ip", "node-port", "no-endpoints":
			some = append(some, sc)
		}
	}
	if len(some) != 3 {
		t.Fatalf("found %d of the 3 scenarios", len(some))
	}
	kerneltest.RunScenarios(t, topo, some, agentHarness(xtables.BackendNFT))
}
