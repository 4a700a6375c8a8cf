//go:build linux

package main

import (
	"testing"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// testE2EUserspace drives the conformance table through a real
// kube-apiserver against minimal-proxy in the userspace mode on cluster c,
// as testE2E does for the iptables mode (TestE2EKubeAPIServer runs both).
func testE2EUserspace(t *testing.T, c *e2eCluster) {
	topo := c.topo
	p := startProxy(t, c.inNS, "minimal-proxy", c.proxyArgs(modeUserspace, "--iptables-min-sync-period=100ms")...)
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
	runScenariosThroughAPI(t, c.env, p, c.h, c.feeder, scenarios, e2eMode{}.dumper(c.inNS), nil)
	p.stop(t)
}
