package netnstest_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Servers answer with their name, the source they saw and the address they
// were reached on; the prober reads masquerading and DNAT from that.
func ExampleParseAnswer() {
	a, err := netnstest.ParseAnswer("pod-a1 10.244.1.1 10.244.1.2:8080\n")
	if err != nil {
		panic(err)
	}
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	fmt.Println(a.Name, "reached on", a.Local)
	fmt.Println("masqueraded:", a.Client == topo.PodGateway)
	// Output:
	// pod-a1 reached on 10.244.1.2:8080
	// masqueraded: true
}

// An engine's real-kernel conformance test (runs as root only).
func ExampleRunKernel() {
	newEngine := func(topo proxytest.Topology) (proxy.Provider, error) {
		return nil, fmt.Errorf("your engine here")
	}
	_ = func(t *testing.T) {
		netnstest.RunKernel(t, v1.IPv4Protocol, netnstest.KernelHarness{
			New: func(t *testing.T, env *netnstest.Env, opts proxytest.Options) proxy.Provider {
				var p proxy.Provider
				// Build inside the node so feature probes see its iptables.
				err := netnstest.Exec(env.Node, func() error {
					var err error
					p, err = newEngine(env.Topo)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
		})
	}
}
