package ipvs_test

import (
	"context"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// A Proxier over the fakes of ipvstest: feed it a Service and its
// EndpointSlice, sync, and look at the IPVS table and where a packet goes.
// On a node, use ipvskernel.New, ipvskernel.NewIPSet, ipvskernel.NewNetlink, ipvskernel.NewSysctl
// and xtables.New instead.
func Example() {
	fakes := ipvstest.NewFakes(v1.IPv4Protocol)
	fakes.Netlink.AddLink("eth0", netip.MustParseAddr("192.168.0.10"))
	p, err := ipvs.NewProxier(ipvs.Config{Common: engine.Common{NodeName: "node-a"}}, fakes.Interfaces())
	if err != nil {
		panic(err)
	}
	p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withNodePort(30080)))
	p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", "node-a"), ready("10.244.2.6", "node-b")))
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		panic(err)
	}
	fmt.Print(fakes.IPVS.Dump())

	tr := ipvstest.NewTracer(fakes, ipvstest.TracerConfig{})
	res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromExternal, Src: netip.MustParseAddr("203.0.113.1"),
		Dst: netip.MustParseAddr("192.168.0.10"), Port: 30080, Protocol: v1.ProtocolTCP})
	fmt.Println(res, err)
	// Output:
	// Prot LocalAddress:Port Scheduler Flags
	//   -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
	// TCP  10.96.0.10:80 rr
	//   -> 10.244.1.5:8080              Masq    1      0          0
	//   -> 10.244.2.6:8080              Masq    1      0          0
	// TCP  192.168.0.10:30080 rr
	//   -> 10.244.1.5:8080              Masq    1      0          0
	//   -> 10.244.2.6:8080              Masq    1      0          0
	// forwarded to [10.244.1.5:8080 10.244.2.6:8080] masquerade <nil>
}
