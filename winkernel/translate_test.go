package winkernel

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

// The JSON below is the shape hnslib's hcn types marshal to (field names
// and omitempty as in hcn v0.1.3), so a mismatch in our mirror shows here.

func TestLoadBalancerToHCNJSON(t *testing.T) {
	lb := LoadBalancer{
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")},
		SourceVIP:    netip.MustParseAddr("10.244.1.250"),
		Protocol:     ProtocolTCP, InternalPort: 8080, ExternalPort: 80,
		EndpointIDs:  []string{"a", "b"},
		Flags:        FlagDSR | FlagVipExternalIP | FlagLocalRoutedVIP | FlagPreserveDIP | FlagUseMux,
		Distribution: DistributionSourceIP,
	}
	b, err := json.Marshal(lbToHCN(lb))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"HostComputeEndpoints":["a","b"],"SourceVIP":"10.244.1.250","FrontendVIPs":["10.96.0.10"],` +
		`"PortMappings":[{"Protocol":6,"InternalPort":8080,"ExternalPort":80,"DistributionType":2,"Flags":30}],` +
		`"SchemaVersion":{"Major":2},"Flags":1}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestLoadBalancerRoundTrip(t *testing.T) {
	for _, lb := range []LoadBalancer{
		{ID: "1", Protocol: ProtocolUDP, InternalPort: 53, ExternalPort: 30053, EndpointIDs: []string{"x"},
			SourceVIP: netip.MustParseAddr("192.168.50.10"), Flags: FlagVipExternalIP | FlagLocalRoutedVIP},
		{ID: "2", FrontendVIPs: []netip.Addr{netip.MustParseAddr("fd00:10:96::1")}, Protocol: ProtocolTCP,
			InternalPort: 80, ExternalPort: 80, EndpointIDs: []string{"y", "z"}, Flags: FlagIPv6 | FlagILB},
		{ID: "3", Protocol: ProtocolSCTP, ExternalPort: 1, InternalPort: 1, EndpointIDs: []string{"q"}},
	} {
		b, err := json.Marshal(lbToHCN(lb))
		if err != nil {
			t.Fatal(err)
		}
		var mirror hcnLoadBalancer
		if err := json.Unmarshal(b, &mirror); err != nil {
			t.Fatal(err)
		}
		got, err := lbFromHCN(mirror)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, lb) {
			t.Errorf("round trip of %+v gave %+v (json %s)", lb, got, b)
		}
	}
}

func TestLoadBalancerFromHCNListing(t *testing.T) {
	listed := `{"ID":"5d4c","HostComputeEndpoints":["e1"],"FrontendVIPs":["bad"],"PortMappings":[{"Protocol":6}]}`
	var mirror hcnLoadBalancer
	if err := json.Unmarshal([]byte(listed), &mirror); err != nil {
		t.Fatal(err)
	}
	if _, err := lbFromHCN(mirror); err == nil {
		t.Error("an unparsable frontend VIP was accepted")
	}
	listed = `{"ID":"5d4c","HostComputeEndpoints":["e1"],"PortMappings":[{"Protocol":17,"InternalPort":53,"ExternalPort":53,"Flags":16},{"Protocol":6}],"Flags":2}`
	mirror = hcnLoadBalancer{}
	if err := json.Unmarshal([]byte(listed), &mirror); err != nil {
		t.Fatal(err)
	}
	lb, err := lbFromHCN(mirror)
	if err != nil {
		t.Fatal(err)
	}
	want := LoadBalancer{ID: "5d4c", EndpointIDs: []string{"e1"}, Protocol: ProtocolUDP, InternalPort: 53, ExternalPort: 53,
		Flags: FlagIPv6 | FlagVipExternalIP}
	if !reflect.DeepEqual(lb, want) {
		t.Errorf("got %+v, want %+v", lb, want)
	}
}

func TestEndpointTranslation(t *testing.T) {
	ep := Endpoint{NetworkID: "net", IP: netip.MustParseAddr("10.244.2.2"), MAC: "02-11-0a-f4-02-02",
		ProviderAddress: netip.MustParseAddr("192.168.50.11"), Remote: true}
	h, err := endpointToHCN(ep)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(h)
	want := `{"HostComputeNetwork":"net","Policies":[{"Type":"ProviderAddress","Settings":{"ProviderAddress":"192.168.50.11"}}],` +
		`"IpConfigurations":[{"IpAddress":"10.244.2.2"}],"MacAddress":"02-11-0a-f4-02-02","Flags":1,"SchemaVersion":{"Major":2}}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back hcnEndpoint
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	got, err := endpointFromHCN(back)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ep) {
		t.Errorf("round trip gave %+v, want %+v", got, ep)
	}
	// A listed local endpoint with other policies (as the CNI writes them).
	listed := `{"ID":"e9","Name":"cbr0","HostComputeNetwork":"net","Policies":[{"Type":"OutBoundNAT","Settings":{"Exceptions":["10.0.0.0/8"]}}],` +
		`"IpConfigurations":[{"IpAddress":"10.244.1.2","PrefixLength":24}],"MacAddress":"00-15-5d-00-00-01"}`
	back = hcnEndpoint{}
	if err := json.Unmarshal([]byte(listed), &back); err != nil {
		t.Fatal(err)
	}
	got, err = endpointFromHCN(back)
	if err != nil {
		t.Fatal(err)
	}
	want2 := Endpoint{ID: "e9", Name: "cbr0", NetworkID: "net", IP: netip.MustParseAddr("10.244.1.2"), MAC: "00-15-5d-00-00-01"}
	if !reflect.DeepEqual(got, want2) {
		t.Errorf("got %+v, want %+v", got, want2)
	}
}

func TestNetworkFromHCN(t *testing.T) {
	listed := `{"ID":"n1","Name":"vxlan0","Type":"Overlay","Policies":[` +
		`{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.168.50.11","DistributedRouterMacAddress":"02-00-00-00-00-01"}},` +
		`{"Type":"ProviderAddress","Settings":{"ProviderAddress":"192.168.50.10"}},` +
		`{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"nonsense"}}]}`
	var mirror hcnNetwork
	if err := json.Unmarshal([]byte(listed), &mirror); err != nil {
		t.Fatal(err)
	}
	n, errs := networkFromHCN(mirror)
	if len(errs) != 1 {
		t.Errorf("errors: %v, want one for the nonsense prefix", errs)
	}
	want := &Network{ID: "n1", Name: "vxlan0", Type: NetworkOverlay, RemoteSubnets: []RemoteSubnet{{
		DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), IsolationID: 4096,
		ProviderAddress: netip.MustParseAddr("192.168.50.11"), DRMACAddress: "02-00-00-00-00-01"}}}
	if !reflect.DeepEqual(n, want) {
		t.Errorf("got %+v, want %+v", n, want)
	}
	if pa, ok := n.ProviderAddressFor(netip.MustParseAddr("10.244.2.9")); !ok || pa != netip.MustParseAddr("192.168.50.11") {
		t.Errorf("ProviderAddressFor = %v %v", pa, ok)
	}
	if !n.Type.IsOverlay() || !NetworkType("overlay").IsOverlay() {
		t.Error("IsOverlay")
	}
}

func TestNewHNSOffWindows(t *testing.T) {
	if _, err := NewHNS(); err == nil {
		t.Skip("running on Windows")
	} else if err != ErrNotSupported {
		t.Errorf("NewHNS: %v, want ErrNotSupported", err)
	}
}
