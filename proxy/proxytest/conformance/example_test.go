package conformance_test

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// An engine's conformance test: one per IP family, each building the
// engine over its fake for every scenario.
func Example() {
	newEngine := func(topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer, error) {
		return nil, nil, fmt.Errorf("your engine and its fake's tracer here")
	}
	_ = func(t *testing.T) { // TestConformanceIPv4
		conformance.Run(t, v1.IPv4Protocol, conformance.Harness{
			New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
				p, tr, err := newEngine(topo, opts)
				if err != nil {
					t.Fatal(err)
				}
				return p, tr
			},
		})
	}
}

// A Harness's Quirks change what the runner wants, exactly as
// proxytest.ApplyQuirks rewrites the table; a quirk that matches nothing
// fails the run before any engine is built.
func ExampleHarness_quirks() {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	table := proxytest.Scenarios(topo)[:1]
	h := conformance.Harness{Quirks: []proxytest.Quirk{{
		Scenario: "cluster-ip", Step: "two-endpoints", Check: "from-pod",
		Reason: "example: this engine masquerades every proxied packet",
		Adjust: func(want proxytest.Result) proxytest.Result { want.Masquerade = true; return want },
	}}}

	quirked, err := proxytest.ApplyQuirks(table, h.Quirks)
	if err != nil {
		panic(err)
	}
	fmt.Println("table: ", table[0].Steps[0].Checks[0].Want)
	fmt.Println("wanted:", quirked[0].Steps[0].Checks[0].Want)

	h.Quirks[0].Check = "from-nowhere"
	_, err = proxytest.ApplyQuirks(table, h.Quirks)
	fmt.Println(err)
	// Output:
	// table:  forwarded to [10.244.1.2:8080 10.244.2.2:8080] no-masquerade
	// wanted: forwarded to [10.244.1.2:8080 10.244.2.2:8080] masquerade
	// proxytest: quirk "example: this engine masquerades every proxied packet": scenario "cluster-ip" has no step "two-endpoints" with check "from-nowhere"
}
