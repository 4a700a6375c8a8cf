//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// A Proxier over nftablestest's fake (nftkernel.NewInterfaces gives the
// real kernel's): one Service with one endpoint, then where a packet from
// a pod to its cluster IP goes.
func Example() {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p, err := nftables.NewProxier(nftables.Config{
		Common: engine.Common{NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}},
		Netfilter: engine.Netfilter{
			LocalDetector: proxy.LocalDetector{
				Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.0.0/16"),
			},
		},
	}, fakes.Interfaces())
	if err != nil {
		panic(err)
	}
	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []v1.ServicePort{
			{Name: "http", Port: 80, Protocol: v1.ProtocolTCP},
		}},
	})
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
			Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{{Addresses: []string{"10.244.1.5"},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil { // or p.Run(ctx)
		panic(err)
	}

	tr := nftablestest.NewTracer(fakes, nftablestest.TracerConfig{NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.1.10")}})
	for _, pkt := range []proxytest.Packet{
		{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP},
		{Origin: proxytest.FromNode, Src: netip.MustParseAddr("192.168.1.10"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP},
		{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 81, Protocol: v1.ProtocolTCP},
	} {
		res, err := tr.Trace(pkt)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %s\n", pkt, res)
	}
	// Output:
	// pod 10.244.1.9 -> 10.96.0.10:80/TCP: forwarded to [10.244.1.5:8080] no-masquerade
	// node 192.168.1.10 -> 10.96.0.10:80/TCP: forwarded to [10.244.1.5:8080] masquerade
	// pod 10.244.1.9 -> 10.96.0.10:81/TCP: rejected
}
