//go:build linux

package nftablestest_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// A hand-written table: marks, numgen, masquerade.
const handTable = `add table ip kube-proxy
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy svc
add chain ip kube-proxy ep1
add chain ip kube-proxy ep2
add chain ip kube-proxy masq
add rule ip kube-proxy nat-prerouting ip daddr 10.96.0.1 tcp dport 80 jump svc
add rule ip kube-proxy nat-postrouting mark and 0x4000 == 0 return
add rule ip kube-proxy nat-postrouting masquerade fully-random
add rule ip kube-proxy svc ip saddr != 10.244.0.0/16 jump masq
add rule ip kube-proxy svc numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }
add rule ip kube-proxy masq mark set mark or 0x4000
add rule ip kube-proxy ep1 meta l4proto tcp dnat to 10.244.1.2:8080
add rule ip kube-proxy ep2 meta l4proto tcp dnat to 10.244.2.2:8080
`

func TestTracerHandTable(t *testing.T) {
	f := nftablestest.NewFakes(v1.IPv4Protocol)
	if err := f.NFTables.ParseDump(handTable); err != nil {
		t.Fatal(err)
	}
	tr := nftablestest.NewTracer(f, nftablestest.TracerConfig{PodInterface: "veth1", ExternalInterface: "eth0"})
	vip := netip.MustParseAddr("10.96.0.1")
	both := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.2:8080"), netip.MustParseAddrPort("10.244.2.2:8080")}
	for _, tc := range []struct {
		p    proxytest.Packet
		want proxytest.Result
	}{
		{proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: vip, Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.ForwardedTo(false, both...)},
		{proxytest.Packet{Origin: proxytest.FromExternal, Src: netip.MustParseAddr("203.0.113.1"), Dst: vip, Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.ForwardedTo(true, both...)},
		{proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: vip, Port: 80, Protocol: v1.ProtocolUDP},
			proxytest.Result{Verdict: proxytest.NotProxied}},
	} {
		got, err := tr.Trace(tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.p, err)
		}
		if why := proxytest.Match(tc.want, got, false); why != "" {
			t.Errorf("%s: got %s, want %s: %s", tc.p, got, tc.want, why)
		}
	}
}

// Rules the tracer does not understand are errors, not silent passes.
func TestTracerUnknownExpression(t *testing.T) {
	f := nftablestest.NewFakes(v1.IPv4Protocol)
	if err := f.NFTables.ParseDump(`add table ip kube-proxy
add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add rule ip kube-proxy nat-prerouting ct mark 0x1 drop
`); err != nil {
		t.Fatal(err)
	}
	_, err := nftablestest.NewTracer(f, nftablestest.TracerConfig{}).Trace(proxytest.Packet{
		Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: v1.ProtocolTCP})
	if err == nil || !strings.Contains(err.Error(), "unknown expression") {
		t.Errorf("Trace = %v, want an unknown-expression error", err)
	}
}

// Injected faults fail the call and change nothing.
func TestFakeFaults(t *testing.T) {
	f := nftablestest.NewFakes(v1.IPv4Protocol)
	boom := errors.New("boom")
	f.NFTables.FailOn("Run", 1, boom)
	tx := f.NFTables.NewTransaction()
	tx.Add(&knftables.Table{})
	if err := f.NFTables.Run(context.Background(), tx); !errors.Is(err, boom) {
		t.Fatalf("Run = %v", err)
	}
	if f.NFTables.Table != nil {
		t.Error("failed Run changed the fake")
	}
	if f.NFTables.CallsOf("Run") != 1 {
		t.Errorf("calls: %v", f.NFTables.Calls())
	}
}

// The engine's own dispatch, "numgen random mod N 0 goto X" rules ending in
// a plain goto, reaches every endpoint, as upstream's inline vmap does.
func TestTracerCascadedNumgen(t *testing.T) {
	f := nftablestest.NewFakes(v1.IPv4Protocol)
	table := strings.Replace(handTable, "add rule ip kube-proxy svc numgen random mod 2 vmap { 0 : goto ep1 , 1 : goto ep2 }\n",
		"add rule ip kube-proxy svc numgen random mod 3 0 goto ep1\nadd rule ip kube-proxy svc numgen random mod 2 == 0 goto ep2\nadd rule ip kube-proxy svc goto ep3\n", 1)
	table = strings.Replace(table, "add chain ip kube-proxy masq\n", "add chain ip kube-proxy masq\nadd chain ip kube-proxy ep3\n", 1) +
		"add rule ip kube-proxy ep3 meta l4proto tcp dnat to 10.244.3.2:8080\n"
	if err := f.NFTables.ParseDump(table); err != nil {
		t.Fatal(err)
	}
	tr := nftablestest.NewTracer(f, nftablestest.TracerConfig{PodInterface: "veth1", ExternalInterface: "eth0"})
	got, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"),
		Dst: netip.MustParseAddr("10.96.0.1"), Port: 80, Protocol: v1.ProtocolTCP})
	if err != nil {
		t.Fatal(err)
	}
	want := proxytest.ForwardedTo(false, netip.MustParseAddrPort("10.244.1.2:8080"),
		netip.MustParseAddrPort("10.244.2.2:8080"), netip.MustParseAddrPort("10.244.3.2:8080"))
	if why := proxytest.Match(want, got, false); why != "" {
		t.Errorf("got %s, want %s: %s", got, want, why)
	}
}
