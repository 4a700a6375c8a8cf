package ipvskernel_test

import (
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// TestNewInterfaces: in a namespace of the test's own, NewInterfaces
// fills every interface an ipvs.Proxier drives (keeping a given iptables
// runner), and a Proxier takes them (where the kernel has IPVS).
func TestNewInterfaces(t *testing.T) {
	ipt := ipvstest.NewFakes(v1.IPv4Protocol).IPTables
	_, haveIPVS := os.Stat("/proc/net/ip_vs")
	netnstest.InFreshNetns(t, func() {
		ifs, err := ipvskernel.NewInterfaces(ipvskernel.InterfacesOptions{Family: v1.IPv4Protocol, IPTables: ipt})
		if err != nil {
			t.Fatal(err)
		}
		defer ifs.IPVS.Close()
		if ifs.IPVS == nil || ifs.IPSet == nil || ifs.Netlink == nil || ifs.Sysctl == nil || ifs.IPTables != ipt {
			t.Fatalf("NewInterfaces = %+v", ifs)
		}
		if haveIPVS != nil {
			t.Logf("no IPVS on this kernel (%v): no Proxier built", haveIPVS)
			return
		}
		if _, err := ipvs.NewProxier(ipvs.Config{Common: engine.Common{NodeName: "node"}}, ifs); err != nil {
			t.Fatal(err)
		}
	})
}
