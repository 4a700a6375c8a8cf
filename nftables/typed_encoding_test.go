//go:build linux

package nftables_test

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestTypedEncoding: the typed rules of the golden services (both
// families, every local-traffic detector, masquerade-all, source ranges
// of one prefix, of several, and holding the node) encode over netlink
// byte for byte as their nft text did when the encoder parsed it; so do
// their set and map elements (added and deleted).
func TestTypedEncoding(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(fam)
		other := "203.0.113.0/25"
		if fam == v1.IPv6Protocol {
			other = "2001:db8:99::/48"
		}
		for _, tc := range []struct {
			name   string
			detect proxy.LocalDetector
			masq   bool
			ranges []string
		}{
			{"cluster-cidr", proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR}, false, nil},
			{"bridge", proxy.LocalDetector{Mode: proxy.LocalModeBridgeInterface, Interface: "cbr0"}, false, []string{other, proxytest.HostPrefix(topo.NodeIP).String()}},
			{"prefix", proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"}, true, []string{other, netip.PrefixFrom(topo.NodeIP, topo.NodeIP.BitLen()-4).Masked().String()}},
			{"none", proxy.LocalDetector{}, true, []string{proxytest.HostPrefix(topo.NodeIP).String()}},
		} {
			t.Run(fmt.Sprintf("%s/%s", fam, tc.name), func(t *testing.T) {
				svcs, slices := goldenObjects(topo)
				for _, s := range svcs {
					if s.Name == "lb" && tc.ranges != nil {
						s.Spec.LoadBalancerSourceRanges = tc.ranges
					}
				}
				cfg := conformanceConfig(topo, proxytest.Options{MasqueradeAll: tc.masq})
				cfg.LocalDetector = tc.detect
				p := newTestProxier(t, nftablestest.NewFakes(fam), cfg)
				nftables.KeepPlannedRules(p)
				for _, s := range svcs {
					p.OnServiceAdd(s)
				}
				for _, s := range slices {
					p.OnEndpointSliceAdd(s)
				}
				p.OnServiceSynced()
				p.OnEndpointSlicesSynced()
				mustSync(t, p)
				bad, n := nftables.TypedEncodingMismatches(p)
				if n < 15 {
					t.Fatalf("only %d rules compared", n)
				}
				for _, m := range bad {
					t.Error(m)
				}
				bad, n = nftables.TypedElementMismatches(p)
				if n < 2*12 {
					t.Fatalf("only %d elements compared", n)
				}
				for _, m := range bad {
					t.Error(m)
				}
			})
		}
	}
}
