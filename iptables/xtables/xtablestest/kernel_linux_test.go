//go:build linux

package xtablestest_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestTracerAgreesWithKernel loads the same rules into the node namespace
// of a real conformance topology (internal/netnstest: namespaces, veths
// and servers made for this test and removed after it; root only) and
// sends real connections: the kernel must do what the Tracer says (which
// TestTracerOnConformanceTopology checks against the same expectations).
func TestTracerAgreesWithKernel(t *testing.T) {
	for _, tc := range []struct {
		backend string
		family  v1.IPFamily
	}{{"nft", v1.IPv4Protocol}, {"legacy", v1.IPv4Protocol}, {"nft", v1.IPv6Protocol}, {"legacy", v1.IPv6Protocol}} {
		backend, family := tc.backend, tc.family
		t.Run(backend+"/"+string(family), func(t *testing.T) {
			restore := "iptables-" + backend + "-restore"
			if family == v1.IPv6Protocol {
				restore = "ip6tables-" + backend + "-restore"
			}
			if _, err := exec.LookPath(restore); err != nil {
				t.Skipf("needs %s: %v", restore, err)
			}
			topo := proxytest.DefaultTopology(family)
			env := netnstest.NewEnv(t, topo) // skips unless root
			err := netnstest.Exec(env.Node, func() error {
				cmd := exec.Command(restore, "--noflush")
				cmd.Stdin = strings.NewReader(topologyRuleset(topo))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("%s: %v: %s", restore, err, stderr.String())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			prober := env.Prober()
			for _, tc := range topologyCases(topo) {
				got, err := prober.TraceSample(tc.p, tc.want)
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					continue
				}
				if why := proxytest.Match(tc.want, got, true); why != "" {
					t.Errorf("%s: kernel: %s (got %s, want %s)", tc.name, why, got, tc.want)
				}
			}
		})
	}
}
