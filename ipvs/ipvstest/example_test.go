package ipvstest_test

import (
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
)

// The fakes keep state, enforce the kernel's rules, count calls and inject
// failures.
func Example() {
	f := ipvstest.NewIPVS()
	if err := f.Load("TCP 10.96.0.10:80 rr persistent 600\n  -> 10.244.1.5:8080 Masq 1 0 0\n"); err != nil {
		panic(err)
	}
	vs := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80, Scheduler: "rr"}
	fmt.Println(errors.Is(f.AddVirtualServer(vs), ipvs.ErrExists))

	f.FailOn("AddRealServer", 1, errors.New("injected"))
	fmt.Println(f.AddRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.2.6"), Port: 8080, Weight: 1}))
	fmt.Println(f.AddRealServer(vs, &ipvs.RealServer{Address: netip.MustParseAddr("10.244.2.6"), Port: 8080, Weight: 1}))
	fmt.Print(f.Dump())

	s := ipvstest.NewIPSet()
	_ = s.CreateSet(ipvs.Set{Name: "KUBE-CLUSTER-IP", Type: ipvs.HashIPPort, Family: v1.IPv4Protocol})
	_ = s.AddEntry("KUBE-CLUSTER-IP", ipvs.Entry{IP: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80})
	fmt.Println(s.AddEntry("KUBE-CLUSTER-IP", ipvs.Entry{Port: 80}) != nil) // wrong shape for hash:ip,port
	fmt.Print(s.Dump())
	// Output:
	// true
	// injected
	// <nil>
	// Prot LocalAddress:Port Scheduler Flags
	//   -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
	// TCP  10.96.0.10:80 rr persistent 600
	//   -> 10.244.1.5:8080              Masq    1      0          0
	//   -> 10.244.2.6:8080              Masq    1      0          0
	// true
	// Name: KUBE-CLUSTER-IP
	// Type: hash:ip,port
	// Header: family inet
	// Number of entries: 1
	// Members:
	// 10.96.0.10,tcp:80
}
