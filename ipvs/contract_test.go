package ipvs_test

import (
	"testing"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// Plain forwarding wrappers, as an embedder writes them to log, count or
// time a driver: each embeds the interface and overrides nothing.
type (
	fwdIPVS    struct{ ipvs.Interface }
	fwdIPSet   struct{ ipvs.IPSet }
	fwdNetlink struct{ ipvs.Netlink }
	fwdRunner  struct{ xtables.Runner }
	fwdSysctl  struct{ ipvs.Sysctl }
)

// TestForwardingWrappersSameEngine: over forwarding wrappers of its
// Interfaces the engine makes the same syncs and the same writes, and
// reports the same stats, as over the fakes themselves.
func TestForwardingWrappersSameEngine(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			conformance.RunWrapped(t, fam, conformance.WrappedHarness{
				New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options, wrap bool) (proxy.Provider, func() any) {
					e := newEnvFor(t, topo, ipvs.Config{
						Common: engine.Common{IPFamily: topo.Family, NodeName: topo.NodeName, Logger: testr.New(t)},
						Netfilter: engine.Netfilter{
							MasqueradeAll: opts.MasqueradeAll,
							LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
						},
					})
					if wrap {
						ifs := e.f.Interfaces()
						ifs = ipvs.Interfaces{IPVS: fwdIPVS{ifs.IPVS}, IPSet: fwdIPSet{ifs.IPSet}, Netlink: fwdNetlink{ifs.Netlink}, IPTables: fwdRunner{ifs.IPTables}, Sysctl: fwdSysctl{ifs.Sysctl}}
						p, err := ipvs.NewProxier(e.cfg, ifs)
						if err != nil {
							t.Fatal(err)
						}
						e.p = p
					}
					observe := func() any {
						return []any{e.f.Dump(), e.f.IPVS.Calls(), e.f.IPSet.Calls(), e.f.Netlink.Calls(), e.f.IPTables.Calls(), e.f.IPTables.Stats(), e.ct.calls,
							conformance.ComparableStats(e.p.Stats())}
					}
					return e.p, observe
				},
			})
		})
	}
}
