package proxy

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestLocalDetector(t *testing.T) {
	tests := []struct {
		name    string
		d       LocalDetector
		family  v1.IPFamily
		wantErr bool
		match   []string // IPTablesMatch(false)
	}{
		{"off matches nothing", LocalDetector{}, v1.IPv4Protocol, false, nil},
		{"cluster CIDR matches the source, masked", LocalDetector{Mode: LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.1.7/16")}, v1.IPv4Protocol, false, []string{"-s", "10.244.0.0/16"}},
		{"node CIDR of IPv6", LocalDetector{Mode: LocalModeNodeCIDR, CIDR: netip.MustParsePrefix("fd00:10::/64")}, v1.IPv6Protocol, false, []string{"-s", "fd00:10::/64"}},
		{"bridge matches the input interface", LocalDetector{Mode: LocalModeBridgeInterface, Interface: "cbr0"}, v1.IPv4Protocol, false, []string{"-i", "cbr0"}},
		{"prefix matches interfaces by wildcard", LocalDetector{Mode: LocalModeInterfaceNamePrefix, Interface: "veth"}, v1.IPv4Protocol, false, []string{"-i", "veth+"}},
		{"CIDR of the wrong family is refused", LocalDetector{Mode: LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("fd00::/64")}, v1.IPv4Protocol, true, nil},
		{"CIDR mode without a CIDR is refused", LocalDetector{Mode: LocalModeNodeCIDR}, v1.IPv4Protocol, true, nil},
		{"interface mode without a name is refused", LocalDetector{Mode: LocalModeBridgeInterface}, v1.IPv4Protocol, true, nil},
		{"unknown mode is refused", LocalDetector{Mode: "Magic"}, v1.IPv4Protocol, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Validate(tc.family)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got := tc.d.IPTablesMatch(false); !slices.Equal(got, tc.match) {
				t.Errorf("IPTablesMatch(false) = %q, want %q", got, tc.match)
			}
			neg := tc.d.IPTablesMatch(true)
			if tc.match == nil {
				if neg != nil {
					t.Errorf("IPTablesMatch(true) = %q, want nil", neg)
				}
			} else if !slices.Equal(neg, append([]string{"!"}, tc.match...)) {
				t.Errorf("IPTablesMatch(true) = %q, want ! %q", neg, tc.match)
			}
		})
	}
}
