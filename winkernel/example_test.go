package winkernel_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// A winkernel proxier against the fake HNS (on Windows, pass
// winkernel.Interfaces{HNS: hns} with hns from winkernel.NewHNS()).
func Example() {
	fakes := winkerneltest.NewFakes(v1.IPv4Protocol)
	fakes.SetNetwork(winkernel.NetworkOverlay, winkernel.RemoteSubnet{
		DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.50.11"),
	})
	fakes.AddPod("web-1", netip.MustParseAddr("10.244.1.5")) // the CNI's endpoint

	p, err := winkernel.NewProxier(winkernel.Config{
		Common:      engine.Common{NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.50.10")}},
		NetworkName: winkerneltest.NetworkName,
		SourceVIP:   netip.MustParseAddr("10.244.1.250"),
	}, fakes.Interfaces())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       v1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	})
	ready, port, proto, name := true, int32(8080), v1.ProtocolTCP, "http"
	local, remote := "node-a", "node-b"
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: &local, Conditions: discovery.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.244.2.7"}, NodeName: &remote, Conditions: discovery.EndpointConditions{Ready: &ready}},
		},
		Ports: []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil { // or p.Run(ctx)
		panic(err)
	}
	fmt.Print(fakes.Dump())
	// Output:
	// network vxlan0 Overlay remote 10.244.2.0/24 via 192.168.50.11
	// endpoint 10.96.0.10 remote pa=192.168.50.10 mac=
	// endpoint 10.244.1.5 local name=web-1
	// endpoint 10.244.1.250 local name=svcproxy-source-vip
	// endpoint 10.244.2.7 remote pa=192.168.50.11 mac=02-11-0a-f4-02-07
	// lb 10.96.0.10:80/tcp -> 10.244.1.5:8080 10.244.2.7:8080 src=10.244.1.250 flags=none dist=none
}
