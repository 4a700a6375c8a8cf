package proxytest_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// The Feeder turns a sequence of whole states into the events an informer
// would deliver; here a Recorder prints them.
func ExampleFeeder() {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	rec := &proxytest.Recorder{}
	f := proxytest.NewFeeder(rec)

	node := proxytest.MakeNode(topo, topo.Zone)
	web := proxytest.MakeService(topo, "web", topo.ServiceIP(1),
		[]proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, nil)
	slice := proxytest.MakeSlice(topo, "web", "1", []proxytest.SlicePortSpec{{Name: "http", Port: 8080}},
		proxytest.EndpointSpec{Pod: topo.LocalPods[0]})
	moved := web.DeepCopy()
	moved.Spec.Ports[0].Port = 82

	steps := []proxytest.Objects{
		{Services: []*v1.Service{web}, Node: node},
		{Services: []*v1.Service{moved}, EndpointSlices: []*discovery.EndpointSlice{slice}, Node: node},
		{Services: []*v1.Service{moved}, EndpointSlices: []*discovery.EndpointSlice{slice}}, // only the node goes
		{},
	}
	for i, st := range steps {
		if err := f.Apply(st); err != nil {
			fmt.Println(err)
		}
		if i == 0 {
			f.Synced()
		}
	}
	for _, e := range rec.Events() {
		fmt.Println(e)
	}
	// Output:
	// node add node-a rv 1
	// service add conformance/web rv 2
	// service synced
	// endpointslice synced
	// node synced
	// service update conformance/web rv 2->3
	// endpointslice add conformance/web-1 rv 4
	// node delete node-a rv 1
	// service delete conformance/web rv 3
	// endpointslice delete conformance/web-1 rv 4
}

// Scenarios is a plain table: list what it covers.
func ExampleScenarios() {
	topo := proxytest.DefaultTopology(v1.IPv6Protocol)
	sc := proxytest.Scenarios(topo)[0]
	ck := sc.Steps[0].Checks[0]
	fmt.Println(sc.Name, "/", sc.Steps[0].Name, "/", ck.Name)
	fmt.Println(ck.Packet)
	fmt.Println(ck.Want)
	// Output:
	// cluster-ip / two-endpoints / from-pod
	// pod fd00:10:244:1::9 -> [fd00:10:96::1]:80/TCP
	// forwarded to [[fd00:10:244:1::2]:8080 [fd00:10:244:2::2]:8080] no-masquerade
}
