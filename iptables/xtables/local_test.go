package xtables_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

func TestLocalMatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     proxy.LocalDetector
		match []string // LocalMatch(d, false)
	}{
		{"off matches nothing", proxy.LocalDetector{}, nil},
		{"cluster CIDR matches the source, masked", proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.1.7/16")}, []string{"-s", "10.244.0.0/16"}},
		{"node CIDR of IPv6", proxy.LocalDetector{Mode: proxy.LocalModeNodeCIDR, CIDR: netip.MustParsePrefix("fd00:10::/64")}, []string{"-s", "fd00:10::/64"}},
		{"bridge matches the input interface", proxy.LocalDetector{Mode: proxy.LocalModeBridgeInterface, Interface: "cbr0"}, []string{"-i", "cbr0"}},
		{"prefix matches interfaces by wildcard", proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"}, []string{"-i", "veth+"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := xtables.LocalMatch(tc.d, false); !slices.Equal(got, tc.match) {
				t.Errorf("LocalMatch(false) = %q, want %q", got, tc.match)
			}
			neg := xtables.LocalMatch(tc.d, true)
			if tc.match == nil {
				if neg != nil {
					t.Errorf("LocalMatch(true) = %q, want nil", neg)
				}
			} else if !slices.Equal(neg, append([]string{"!"}, tc.match...)) {
				t.Errorf("LocalMatch(true) = %q, want ! %q", neg, tc.match)
			}
		})
	}
}
