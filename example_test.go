package svcproxy_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Example: the same Service and EndpointSlice programmed by two engines
// into their shipped fakes, and the same question asked of each tracer:
// where does a packet from a pod to 10.96.0.10:80 go now?
func Example() {
	ctx := context.Background()
	packet := proxytest.Packet{
		Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"),
		Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
	}

	// iptables mode.
	ipt := iptablestest.NewFakes(v1.IPv4Protocol)
	iptProxier, err := iptables.NewProxier(iptables.Config{Common: engine.Common{NodeName: "node-a"}}, ipt.Interfaces())
	if err != nil {
		panic(err)
	}
	feed(iptProxier)
	if err := iptProxier.Sync(ctx); err != nil {
		panic(err)
	}
	res, err := iptablestest.NewTracer(ipt, iptablestest.TracerConfig{}).Trace(packet)
	fmt.Println("iptables:", res.Verdict, res.Backends, err)

	// IPVS mode, with its own fakes (and the iptables fake for its small ruleset).
	ipvsFakes := ipvstest.NewFakes(v1.IPv4Protocol)
	ipvsFakes.Netlink.AddLink("eth0", netip.MustParseAddr("192.168.0.10"))
	ipvsProxier, err := ipvs.NewProxier(ipvs.Config{Common: engine.Common{NodeName: "node-a"}}, ipvsFakes.Interfaces())
	if err != nil {
		panic(err)
	}
	feed(ipvsProxier)
	if err := ipvsProxier.Sync(ctx); err != nil {
		panic(err)
	}
	res, err = ipvstest.NewTracer(ipvsFakes, ipvstest.TracerConfig{}).Trace(packet)
	fmt.Println("ipvs:", res.Verdict, res.Backends, err)
	// Output:
	// iptables: forwarded [10.244.1.5:8080 10.244.2.6:8080] <nil>
	// ipvs: forwarded [10.244.1.5:8080 10.244.2.6:8080] <nil>
}

// feed hands a Provider one Service with two ready endpoints and reports
// both lists synced, as informers would.
func feed(p proxy.Provider) {
	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	})
	endpoint := func(ip, node string) discovery.Endpoint {
		return discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}}
	}
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
		Endpoints:   []discovery.Endpoint{endpoint("10.244.1.5", "node-a"), endpoint("10.244.2.6", "node-b")},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
}
