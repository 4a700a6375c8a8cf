package winkerneltest_test

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// Seed the fake, program one load balancer, and trace a packet.
func Example() {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	id := f.AddPod("web-1", netip.MustParseAddr("10.244.1.5"))
	_, err := f.HNS.CreateLoadBalancer(winkernel.LoadBalancer{
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("10.96.0.10")}, SourceVIP: netip.MustParseAddr("10.244.1.250"),
		Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80, EndpointIDs: []string{id},
	})
	if err != nil {
		panic(err)
	}
	tr := winkerneltest.NewTracer(f, winkerneltest.TracerConfig{})
	res, _ := tr.Trace(proxytest.Packet{Origin: proxytest.FromNode, Src: netip.MustParseAddr("192.168.50.10"),
		Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP})
	fmt.Println(res)
	fmt.Println(f.HNS.CallsOf("CreateLoadBalancer"), "create")
	// Output:
	// forwarded to [10.244.1.5:8080] masquerade
	// 1 create
}

// Start from an HNS state written as text (what Dump writes), as a node
// left by an earlier run or another program.
func ExampleNewFakesFromDump() {
	f, err := winkerneltest.NewFakesFromDump(v1.IPv4Protocol, `
network vxlan0 Overlay remote 10.244.2.0/24 via 192.168.50.11
endpoint 10.244.1.5 local name=web-1
endpoint 10.244.2.7 remote pa=192.168.50.11 mac=02-11-0a-f4-02-07
lb 10.96.0.10:80/tcp -> 10.244.1.5:8080 10.244.2.7:8080 src=10.244.1.250 flags=none dist=none
`)
	if err != nil {
		panic(err)
	}
	tr := winkerneltest.NewTracer(f, winkerneltest.TracerConfig{})
	res, _ := tr.Trace(proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"),
		Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP})
	fmt.Println(res)
	fmt.Print(f.Dump())
	// Output:
	// forwarded to [10.244.1.5:8080 10.244.2.7:8080] no-masquerade
	// network vxlan0 Overlay remote 10.244.2.0/24 via 192.168.50.11
	// endpoint 10.244.1.5 local name=web-1
	// endpoint 10.244.2.7 remote pa=192.168.50.11 mac=02-11-0a-f4-02-07
	// lb 10.96.0.10:80/tcp -> 10.244.1.5:8080 10.244.2.7:8080 src=10.244.1.250 flags=none dist=none
}
