package changetracker

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

func legacyEndpoints() *v1.Endpoints {
	return &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc", Labels: map[string]string{"app": "x"}},
		Subsets: []v1.EndpointSubset{{
			Addresses:         []v1.EndpointAddress{{IP: "10.1.0.1", NodeName: ptr.To("node-1")}, {IP: "fd00::1"}, {IP: "junk"}},
			NotReadyAddresses: []v1.EndpointAddress{{IP: "10.1.0.2"}},
			Ports:             []v1.EndpointPort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}},
		}, {
			Addresses: []v1.EndpointAddress{{IP: "10.1.0.3"}},
			Ports:     []v1.EndpointPort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}},
		}},
	}
}

func TestEndpointsToSlices(t *testing.T) {
	got := EndpointsToSlices(legacyEndpoints())
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
		if s.Labels[discovery.LabelServiceName] != "svc" || s.Labels["app"] != "x" || s.Namespace != "ns" {
			t.Errorf("slice %s labels/namespace = %v %s", s.Name, s.Labels, s.Namespace)
		}
	}
	if want := []string{"svc-legacy-0-ipv4", "svc-legacy-0-ipv6", "svc-legacy-1-ipv4"}; !slices.Equal(names, want) {
		t.Fatalf("names = %v, want %v", names, want)
	}
	if got[0].AddressType != discovery.AddressTypeIPv4 || got[1].AddressType != discovery.AddressTypeIPv6 {
		t.Fatal("wrong address types")
	}
	if n := len(got[0].Endpoints); n != 2 || *got[0].Endpoints[1].Conditions.Ready || *got[0].Endpoints[1].Conditions.Serving {
		t.Fatalf("notReadyAddresses not converted to ready=false: %+v", got[0].Endpoints)
	}
	if !slices.Equal(EndpointsToSlices(legacyEndpoints())[2].Endpoints[0].Addresses, got[2].Endpoints[0].Addresses) {
		t.Fatal("conversion not deterministic")
	}
	if EndpointsToSlices(nil) != nil {
		t.Fatal("nil Endpoints should give nil")
	}

	// The converted slices feed the tracker like real ones.
	tr := newEPTracker(v1.IPv4Protocol, proxy.EndpointFilter{})
	for _, s := range got {
		tr.EndpointSliceUpdate(s, false)
	}
	m := make(EndpointsMap)
	m.Update(tr)
	http := m[spn("ns", "svc", "http", v1.ProtocolTCP)]
	if s := endpointStrings(http); !slices.Equal(s, []string{"10.1.0.1:8080", "10.1.0.2:8080"}) || !http[0].IsLocal() || http[1].IsReady() {
		t.Fatalf("http endpoints = %v", http)
	}
	if s := endpointStrings(m[spn("ns", "svc", "dns", v1.ProtocolUDP)]); !slices.Equal(s, []string{"10.1.0.3:53"}) {
		t.Fatalf("dns endpoints = %v", s)
	}
}

func TestEndpointsUpdateToSlices(t *testing.T) {
	old := legacyEndpoints()
	cur := old.DeepCopy()
	cur.Subsets = cur.Subsets[:1]
	cur.Subsets[0].Addresses = cur.Subsets[0].Addresses[:1] // the IPv6 address goes
	update, remove := EndpointsUpdateToSlices(old, cur)
	if len(update) != 1 || update[0].Name != "svc-legacy-0-ipv4" {
		t.Fatalf("update = %v", update)
	}
	var removed []string
	for _, s := range remove {
		removed = append(removed, s.Name)
	}
	if !slices.Equal(removed, []string{"svc-legacy-0-ipv6", "svc-legacy-1-ipv4"}) {
		t.Fatalf("remove = %v", removed)
	}
	if _, remove = EndpointsUpdateToSlices(old, nil); len(remove) != 3 {
		t.Fatalf("delete should remove all 3 slices, got %d", len(remove))
	}
}
