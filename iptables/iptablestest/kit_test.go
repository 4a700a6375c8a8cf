package iptablestest_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestTracerReadsEngineSysctl: the Tracer of the kit's NewTracer reads
// route_localnet from the Fakes' Sysctl under the name the engine writes
// (iptables.SysctlRouteLocalnet, which xtablestest knows as RouteLocalnet
// without importing the engine).
func TestTracerReadsEngineSysctl(t *testing.T) {
	if iptables.SysctlRouteLocalnet != xtablestest.RouteLocalnet {
		t.Fatalf("iptables.SysctlRouteLocalnet %q, xtablestest.RouteLocalnet %q", iptables.SysctlRouteLocalnet, xtablestest.RouteLocalnet)
	}
	fakes := iptablestest.NewFakes(v1.IPv4Protocol)
	fake, err := iptablestest.NewFakeFromDump(v1.IPv4Protocol, "*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -d 127.0.0.1/32 -p tcp -m tcp --dport 30080 -j DNAT --to-destination 10.0.0.2:80\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	fakes.IPTables = fake
	pkt := proxytest.Packet{Origin: proxytest.FromNode, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), Port: 30080, Protocol: v1.ProtocolTCP}
	for _, on := range []int{0, 1} {
		if err := fakes.Sysctl.Set(iptables.SysctlRouteLocalnet, on); err != nil {
			t.Fatal(err)
		}
		res, err := iptablestest.NewTracer(fakes, iptablestest.TracerConfig{}).Trace(pkt)
		if err != nil {
			t.Fatal(err)
		}
		want := proxytest.Dropped
		if on == 1 {
			want = proxytest.Forwarded
		}
		if res.Verdict != want {
			t.Errorf("route_localnet=%d: verdict %v, want %v", on, res.Verdict, want)
		}
	}
}
