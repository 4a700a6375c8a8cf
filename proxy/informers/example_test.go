package informers_test

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/informers"
)

func Example() {
	// A real program passes a clientset built from its kubeconfig.
	client := fake.NewClientset(
		&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []v1.ServicePort{
				{Name: "http", Port: 80, Protocol: v1.ProtocolTCP},
			}},
		},
		&discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
			AddressType: discovery.AddressTypeIPv4,
			Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.1.0.5"}}},
			Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
		},
	)
	opts := informers.Options{}
	factory, err := informers.NewInformerFactory(client, 15*time.Minute, opts)
	if err != nil {
		panic(err)
	}
	nodeFactory, err := informers.NewNodeInformerFactory(client, 15*time.Minute, "node-a")
	if err != nil {
		panic(err)
	}

	// Any proxy.Provider (an engine) goes here; a bare tracker shows what
	// arrives.
	tracker := changetracker.New(changetracker.Config{IPFamily: v1.IPv4Protocol, NodeName: "node-a"})
	stop := make(chan struct{})
	defer close(stop)
	opts.Stop = stop
	if err := informers.Register(factory, nodeFactory, tracker, opts); err != nil {
		panic(err)
	}
	factory.Start(stop)
	nodeFactory.Start(stop)

	for !tracker.Synced() {
		time.Sleep(10 * time.Millisecond)
	}
	u := tracker.Update()
	var lines []string
	for name, eps := range u.Endpoints {
		lines = append(lines, fmt.Sprintf("%s -> %s %v", name, u.Services[name], eps))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// default/web:http -> 10.96.0.10:80/TCP [10.1.0.5:8080]
}
