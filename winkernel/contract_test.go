package winkernel_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/winkernel"
)

// fwdHNS is a plain forwarding wrapper, as an embedder writes one to log,
// count or time HNS calls: it embeds the interface and overrides nothing.
type fwdHNS struct{ winkernel.HNS }

// TestForwardingWrappersSameEngine: over a forwarding wrapper of its HNS
// the engine makes the same syncs and the same HNS calls, and reports the
// same stats, as over the fake itself.
func TestForwardingWrappersSameEngine(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			conformance.RunWrapped(t, fam, conformance.WrappedHarness{
				New: func(t *testing.T, topo proxytest.Topology, _ proxytest.Options, wrap bool) (proxy.Provider, func() any) {
					f := newTopoFakes(topo, winkernel.NetworkOverlay)
					ifs := f.Interfaces()
					if wrap {
						ifs.HNS = fwdHNS{ifs.HNS}
					}
					p, err := winkernel.NewProxier(topoConfig(topo), ifs)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { p.Close() })
					observe := func() any {
						return []any{f.Dump(), f.HNS.Calls(), conformance.ComparableStats(p.Stats())}
					}
					return p, observe
				},
			})
		})
	}
}
