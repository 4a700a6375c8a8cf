package userspacetest_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// Trace a pod's packet to a cluster IP through the capture rules the
// proxier wrote into the kit's fake iptables.
func Example() {
	fakes := userspacetest.NewFakes(v1.IPv4Protocol)
	nodeIP := netip.MustParseAddr("192.168.50.10")
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", NodeIPs: []netip.Addr{nodeIP}}}, fakes.Interfaces())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	})
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.244.1.2"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.2.2"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
		},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	tr := userspacetest.NewTracer(fakes, userspacetest.TracerConfig{Proxier: p})
	for _, port := range []int{80, 81} {
		res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"),
			Dst: netip.MustParseAddr("10.96.0.10"), Port: port, Protocol: v1.ProtocolTCP})
		fmt.Println(port, res, err)
	}
	// Output:
	// 80 forwarded to [10.244.1.2:8080 10.244.2.2:8080] masquerade <nil>
	// 81 not-proxied <nil>
}
