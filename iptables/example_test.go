package iptables_test

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
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// A Proxier programs the iptables its Interfaces hold: here the kit's
// in-memory fakes, whose tracer then answers where a packet to the service
// goes. On a node, Interfaces{IPTables: r} with r from xtables.New.
func Example() {
	fakes := iptablestest.NewFakes(v1.IPv4Protocol)
	p, err := iptables.NewProxier(iptables.Config{
		Common: engine.Common{NodeName: "node-a"},
		Netfilter: engine.Netfilter{
			LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.0.0/16")},
		},
	}, fakes.Interfaces())
	if err != nil {
		panic(err)
	}
	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	})
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
		Endpoints: []discovery.Endpoint{{
			Addresses:  []string{"10.244.1.5"},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		}},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		panic(err)
	}
	rules, _ := fakes.IPTables.Rules(xtables.TableNAT, xtables.ChainKubeServices)
	fmt.Println(rules[0])

	tr := iptablestest.NewTracer(fakes, iptablestest.TracerConfig{})
	res, _ := tr.Trace(proxytest.Packet{
		Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"),
		Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
	})
	fmt.Println(res.Verdict, res.Backends)
	// Output:
	// -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-CDGGSHYLG3RE2FKL
	// forwarded [10.244.1.5:8080]
}
