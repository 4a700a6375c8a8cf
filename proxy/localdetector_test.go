package proxy

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestLocalDetector(t *testing.T) {
	tests := []struct {
		name    string
		d       LocalDetector
		family  v1.IPFamily
		wantErr bool
	}{
		{"off", LocalDetector{}, v1.IPv4Protocol, false},
		{"cluster CIDR", LocalDetector{Mode: LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.1.7/16")}, v1.IPv4Protocol, false},
		{"node CIDR of IPv6", LocalDetector{Mode: LocalModeNodeCIDR, CIDR: netip.MustParsePrefix("fd00:10::/64")}, v1.IPv6Protocol, false},
		{"bridge", LocalDetector{Mode: LocalModeBridgeInterface, Interface: "cbr0"}, v1.IPv4Protocol, false},
		{"interface prefix", LocalDetector{Mode: LocalModeInterfaceNamePrefix, Interface: "veth"}, v1.IPv4Protocol, false},
		{"CIDR of the wrong family is refused", LocalDetector{Mode: LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("fd00::/64")}, v1.IPv4Protocol, true},
		{"CIDR mode without a CIDR is refused", LocalDetector{Mode: LocalModeNodeCIDR}, v1.IPv4Protocol, true},
		{"interface mode without a name is refused", LocalDetector{Mode: LocalModeBridgeInterface}, v1.IPv4Protocol, true},
		{"unknown mode is refused", LocalDetector{Mode: "Magic"}, v1.IPv4Protocol, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Validate(tc.family)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Validate = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
