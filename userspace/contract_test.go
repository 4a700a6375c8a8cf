package userspace_test

import (
	"net/netip"
	"regexp"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// Plain forwarding wrappers, as an embedder writes them to log, count or
// time a driver: each embeds the interface and overrides nothing.
type (
	fwdRunner  struct{ xtables.Runner }
	fwdSockets struct{ userspace.Sockets }
)

// proxyPort matches the numbers the two runs may differ in: the proxy
// sockets' kernel-chosen ports (and, masked alike, node ports).
var proxyPort = regexp.MustCompile(`\b[0-9]{4,5}\b`)

// TestForwardingWrappersSameEngine: over forwarding wrappers of its
// Interfaces the engine makes the same syncs, the same writes and the same
// socket calls, and reports the same stats, as over the fakes themselves.
// The proxy ports are the kernel's choice in each run, so they are masked.
func TestForwardingWrappersSameEngine(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			conformance.RunWrapped(t, fam, conformance.WrappedHarness{
				New: func(t *testing.T, topo proxytest.Topology, _ proxytest.Options, wrap bool) (proxy.Provider, func() any) {
					fakes := userspacetest.NewFakes(topo.Family)
					ifs := fakes.Interfaces()
					if wrap {
						ifs = userspace.Interfaces{IPTables: fwdRunner{ifs.IPTables}, Sockets: fwdSockets{ifs.Sockets}}
					}
					p, err := userspace.NewProxier(userspace.Config{
						Common:       engine.Common{NodeName: topo.NodeName, IPFamily: topo.Family, NodeIPs: []netip.Addr{topo.NodeIP}},
						HostIP:       topo.NodeIP,
						ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR},
					}, ifs)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { p.Close() })
					observe := func() any {
						st := fakes.IPTables.Stats()
						return []any{proxyPort.ReplaceAllString(fakes.Dump(), "N"), fakes.IPTables.Calls(), fakes.Sockets.Calls(),
							st.Restores, st.FailedRestores, st.RestoreLines, st.Commands, conformance.ComparableStats(p.Stats())}
					}
					return p, observe
				},
			})
		})
	}
}
