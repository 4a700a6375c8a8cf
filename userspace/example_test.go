package userspace_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
)

// A proxier without capture rules: the service is reached at the proxy
// socket that userspace.ProxyAddr reports.
func Example() {
	// A backend on loopback that greets.
	backend, _ := net.Listen("tcp", "127.0.0.1:0")
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello from the backend\n")
			c.Close()
		}
	}()
	port := backend.Addr().(*net.TCPAddr).Port

	p, err := userspace.NewProxier(userspace.Config{
		Common:        engine.Common{NodeName: "node-a"},
		Capture:       userspace.CaptureNone,
		ListenAddress: netip.MustParseAddr("127.0.0.1"),
	}, userspace.Interfaces{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "greeter"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(int32(port))}}},
	})
	p.OnEndpointSliceAdd(&discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "greeter-1", Labels: map[string]string{discovery.LabelServiceName: "greeter"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(port)), Protocol: ptr.To(v1.ProtocolTCP)}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}}},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	name := proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "greeter"}, Port: "http", Protocol: v1.ProtocolTCP}
	addr, _ := userspace.ProxyAddr(p, name, false)
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	line, _ := bufio.NewReader(c).ReadString('\n')
	fmt.Print(line)
	// Output: hello from the backend
}
