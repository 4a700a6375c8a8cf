package engine

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

func TestNetfilterWithDefaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      Netfilter
		wantBit int
		wantErr bool
	}{
		{name: "zero", in: Netfilter{}, wantBit: DefaultMasqueradeBit},
		{name: "minus one is bit 0", in: Netfilter{MasqueradeBit: -1}, wantBit: 0},
		{name: "31", in: Netfilter{MasqueradeBit: 31}, wantBit: 31},
		{name: "32", in: Netfilter{MasqueradeBit: 32}, wantErr: true},
		{name: "minus two", in: Netfilter{MasqueradeBit: -2}, wantErr: true},
		{name: "zero prefix", in: Netfilter{NodePortAddresses: []netip.Prefix{{}}}, wantErr: true},
		{name: "detector of the other family", in: Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("fd00::/48")}}, wantErr: true},
		{name: "detector of the family", in: Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.0.0.0/8")}}, wantBit: DefaultMasqueradeBit},
	} {
		got, err := tc.in.WithDefaults(v1.IPv4Protocol)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: error %v, want one: %v", tc.name, err, tc.wantErr)
			continue
		}
		if err == nil && got.MasqueradeBit != tc.wantBit {
			t.Errorf("%s: MasqueradeBit %d, want %d", tc.name, got.MasqueradeBit, tc.wantBit)
		}
	}
}
