package changetracker_test

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/changetracker"
)

// An engine embeds a Tracker, feeds it events through the proxy handler
// interfaces, and calls Update at each sync.
func ExampleTracker() {
	tracker := changetracker.New(changetracker.Config{
		IPFamily: v1.IPv4Protocol,
		NodeName: "node-1",
		OnChange: func(changetracker.Change) { /* an engine triggers its runner here */ },
	})

	tracker.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			Ports: []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}},
		},
	})
	tracker.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "dns-x7k2p",
			Labels: map[string]string{discovery.LabelServiceName: "dns"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(v1.ProtocolUDP)}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.244.1.7"}, NodeName: ptr.To("node-1")},
			{Addresses: []string{"10.244.2.9"}, NodeName: ptr.To("node-2")},
		},
	})
	tracker.OnServiceSynced()
	tracker.OnEndpointSlicesSynced()

	if !tracker.Synced() {
		return // an engine would return proxy.ErrNotSynced
	}
	update := tracker.Update()
	for name, port := range update.Services {
		fmt.Println(name, "->", port)
		for _, ep := range update.Endpoints[name] {
			fmt.Println("  endpoint", ep, "local:", ep.IsLocal())
		}
	}
	fmt.Println("changed:", update.ChangedServices.UnsortedList())
	fmt.Println("newly active UDP:", update.EndpointsResult.NewlyActiveUDPServices)
	fmt.Println("local ready:", update.EndpointsResult.LocalReadyEndpoints)
	// Output:
	// default/dns:dns -> 10.96.0.10:53/UDP
	//   endpoint 10.244.1.7:5353 local: true
	//   endpoint 10.244.2.9:5353 local: false
	// changed: [default/dns]
	// newly active UDP: [default/dns:dns]
	// local ready: map[default/dns:1]
}

// Legacy Endpoints objects become slices the tracker understands.
func ExampleEndpointsToSlices() {
	ep := &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Subsets: []v1.EndpointSubset{{
			Addresses:         []v1.EndpointAddress{{IP: "10.244.1.7"}, {IP: "fd00:244::7"}},
			NotReadyAddresses: []v1.EndpointAddress{{IP: "10.244.1.8"}},
			Ports:             []v1.EndpointPort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}},
		}},
	}
	slices := changetracker.EndpointsToSlices(ep)
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	for _, s := range slices {
		fmt.Print(s.Name, " ", s.AddressType, ":")
		for _, e := range s.Endpoints {
			fmt.Print(" ", e.Addresses[0], " ready=", *e.Conditions.Ready)
		}
		fmt.Println()
	}
	// Output:
	// web-legacy-0-ipv4 IPv4: 10.244.1.7 ready=true 10.244.1.8 ready=false
	// web-legacy-0-ipv6 IPv6: fd00:244::7 ready=true
}
