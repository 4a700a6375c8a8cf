//go:build linux

package main

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestE2EKubeAPIServerUserspace drives the conformance table through a real
// kube-apiserver against minimal-proxy in the userspace mode, as
// TestE2EKubeAPIServer does for the iptables mode.
func TestE2EKubeAPIServerUserspace(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	bins := buildE2EBinaries(t)
	buildProxyBinary(t)
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) { testE2EUserspace(t, bins, family) })
	}
}

func testE2EUserspace(t *testing.T, bins e2eBinaries, family v1.IPFamily) {
	topo := proxytest.DefaultTopology(family)
	env := netnstest.NewEnv(t, topo)
	inNS := func(fn func() error) error { return netnstest.Exec(env.Node, fn) }

	cp := startControlPlane(t, bins, inNS, "10.95.0.0/24,fd00:95::/112")
	addServiceCIDR(t, cp, topo.ServiceCIDR.String())
	h := &apiHandlers{client: cp.Client}
	h.putNode(proxytest.MakeNode(topo, topo.Zone))
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	feeder := proxytest.NewFeeder(h)

	p := startProxy(t, inNS, "minimal-proxy",
		"--kubeconfig="+cp.Kubeconfig,
		"--hostname-override="+topo.NodeName,
		"--cluster-cidr="+topo.ClusterCIDR.String(),
		"--nodeport-addresses="+proxytest.HostPrefix(topo.NodeIP).String(),
		"--proxy-mode=userspace",
		"--iptables-min-sync-period=100ms",
		"--v=2",
	)
	p.waitHealthy(t)
	if code, body, err := p.get(p.metrics, "/proxyMode"); err != nil || code != 200 || body != modeUserspace {
		t.Fatalf("/proxyMode = %d %q %v, want 200 %q", code, body, err, modeUserspace)
	}

	var scenarios []proxytest.Scenario
	for _, sc := range proxytest.Scenarios(topo) {
		if sc.Options.MasqueradeAll {
			continue // every userspace connection is already masqueraded
		}
		for i := range sc.Steps {
			for j := range sc.Steps[i].Checks {
				want := &sc.Steps[i].Checks[j].Want
				// The one way the userspace mode differs from the table (as
				// in userspace's own conformance tests): the proxy opens the
				// backend connection itself, so backends see the node.
				if want.Verdict == proxytest.Forwarded {
					want.Masquerade = true
				}
			}
		}
		scenarios = append(scenarios, sc)
	}
	runScenariosThroughAPI(t, env, p, h, feeder, scenarios)
	p.stop(t)
}
