package proxy

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestServicePortNameString(t *testing.T) {
	n := ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Protocol: v1.ProtocolTCP}
	if got := n.String(); got != "ns/svc" {
		t.Errorf("unnamed port: %q", got)
	}
	n.Port = "http"
	if got := n.String(); got != "ns/svc:http" {
		t.Errorf("named port: %q", got)
	}
}

func TestAddressRendering(t *testing.T) {
	sp := &BaseServicePort{ClusterIPAddr: netip.MustParseAddr("fd00::1"), PortNum: 53, ProtocolValue: v1.ProtocolUDP}
	if got := sp.String(); got != "[fd00::1]:53/UDP" {
		t.Errorf("IPv6 service port: %q", got)
	}
	ep := &BaseEndpoint{Addr: netip.MustParseAddr("10.0.0.1"), PortNum: 8080}
	if got := ep.String(); got != "10.0.0.1:8080" {
		t.Errorf("endpoint: %q", got)
	}
	if got := (&BaseEndpoint{PortNum: 80}).String(); got != ":80" {
		t.Errorf("endpoint without address: %q", got)
	}
}

func TestTrafficPolicyPredicates(t *testing.T) {
	tests := []struct {
		name                     string
		sp                       BaseServicePort
		external, cluster, local bool
	}{
		{"ClusterIP, both Cluster", BaseServicePort{}, false, true, false},
		{"ClusterIP with eTP Local is not external", BaseServicePort{ExternalLocal: true}, false, true, false},
		{"NodePort with eTP Local", BaseServicePort{NodePortNum: 30000, ExternalLocal: true}, true, true, true},
		{"external IP with eTP Local", BaseServicePort{ExternalIPAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, ExternalLocal: true}, true, true, true},
		{"LB VIP, both Cluster", BaseServicePort{LoadBalancerVIPAddrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}}, true, true, false},
		{"iTP Local only", BaseServicePort{InternalLocal: true}, false, false, true},
		{"iTP Local, NodePort eTP Cluster", BaseServicePort{InternalLocal: true, NodePortNum: 30000}, true, true, true},
		{"both Local, externally accessible: cluster set kept for short-circuiting", BaseServicePort{InternalLocal: true, ExternalLocal: true, NodePortNum: 30000}, true, true, true},
		{"both Local, not externally accessible", BaseServicePort{InternalLocal: true, ExternalLocal: true}, false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sp.ExternallyAccessible(); got != tc.external {
				t.Errorf("ExternallyAccessible = %v", got)
			}
			if got := tc.sp.UsesClusterEndpoints(); got != tc.cluster {
				t.Errorf("UsesClusterEndpoints = %v", got)
			}
			if got := tc.sp.UsesLocalEndpoints(); got != tc.local {
				t.Errorf("UsesLocalEndpoints = %v", got)
			}
		})
	}
}

func TestEndpointFilter(t *testing.T) {
	pfx := func(s string) netip.Prefix { return netip.MustParsePrefix(s) }
	tests := []struct {
		name   string
		filter EndpointFilter
		ip     string
		active bool
		allows bool
	}{
		{"zero filter allows everything", EndpointFilter{}, "192.0.2.1", false, true},
		{"include admits inside", EndpointFilter{IncludeCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}}, "10.1.2.3", true, true},
		{"include rejects outside", EndpointFilter{IncludeCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}}, "192.0.2.1", true, false},
		{"exclude wins over include", EndpointFilter{IncludeCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}, ExcludeCIDRs: []netip.Prefix{pfx("10.9.0.0/16")}}, "10.9.0.1", true, false},
		{"exclude alone admits the rest", EndpointFilter{ExcludeCIDRs: []netip.Prefix{pfx("10.9.0.0/16")}}, "fd00::1", true, true},
		{"IPv4-mapped address is matched as IPv4", EndpointFilter{IncludeCIDRs: []netip.Prefix{pfx("10.0.0.0/8")}}, "::ffff:10.0.0.1", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.filter.Active() != tc.active {
				t.Errorf("Active = %v", !tc.active)
			}
			if got := tc.filter.Allows(netip.MustParseAddr(tc.ip)); got != tc.allows {
				t.Errorf("Allows(%s) = %v", tc.ip, got)
			}
		})
	}
}
