package winkerneltest_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

var (
	vip  = netip.MustParseAddr("10.96.0.10")
	pod1 = netip.MustParseAddr("10.244.1.2")
)

func newLB(ids ...string) winkernel.LoadBalancer {
	return winkernel.LoadBalancer{FrontendVIPs: []netip.Addr{vip}, SourceVIP: netip.MustParseAddr("10.244.1.250"),
		Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80, EndpointIDs: ids}
}

func TestFakeRejectsLikeHNS(t *testing.T) {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	id := f.AddPod("pod1", pod1)
	if _, err := f.HNS.CreateLoadBalancer(newLB(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.HNS.CreateLoadBalancer(newLB(id)); !errors.Is(err, winkernel.ErrPortAlreadyExists) {
		t.Errorf("duplicate VIP/proto/port: %v, want ErrPortAlreadyExists", err)
	}
	udp := newLB(id)
	udp.Protocol = winkernel.ProtocolUDP
	if _, err := f.HNS.CreateLoadBalancer(udp); err != nil {
		t.Errorf("same VIP and port, other protocol: %v", err)
	}
	other := newLB("no-such-endpoint")
	other.ExternalPort = 81
	if _, err := f.HNS.CreateLoadBalancer(other); !errors.Is(err, winkernel.ErrInvalid) {
		t.Errorf("unknown endpoint ID: %v, want ErrInvalid", err)
	}
	many := make([]string, winkerneltest.MaxBackends+1)
	base := netip.MustParseAddr("10.244.3.0")
	for i := range many {
		base = base.Next()
		many[i] = f.AddPod(fmt.Sprint("p", i), base)
	}
	big := newLB(many...)
	big.ExternalPort = 82
	if _, err := f.HNS.CreateLoadBalancer(big); !errors.Is(err, winkernel.ErrInvalid) {
		t.Errorf("%d backends: %v, want ErrInvalid", len(many), err)
	}
	big.EndpointIDs = many[:winkerneltest.MaxBackends]
	if _, err := f.HNS.CreateLoadBalancer(big); err != nil {
		t.Errorf("%d backends: %v", winkerneltest.MaxBackends, err)
	}
	v6 := newLB(id)
	v6.FrontendVIPs = []netip.Addr{netip.MustParseAddr("fd00:10:96::1")}
	v6.SourceVIP = netip.Addr{}
	if _, err := f.HNS.CreateLoadBalancer(v6); !errors.Is(err, winkernel.ErrInvalid) {
		t.Errorf("IPv6 VIP without the IPv6 flag: %v, want ErrInvalid", err)
	}
	v6.Flags = winkernel.FlagIPv6
	if _, err := f.HNS.CreateLoadBalancer(v6); err != nil {
		t.Errorf("IPv6 VIP with the flag: %v", err)
	}
	v4flag := newLB(id)
	v4flag.ExternalPort, v4flag.Flags = 83, winkernel.FlagIPv6
	if _, err := f.HNS.CreateLoadBalancer(v4flag); !errors.Is(err, winkernel.ErrInvalid) {
		t.Errorf("IPv4 VIP with the IPv6 flag: %v, want ErrInvalid", err)
	}
	if err := f.HNS.DeleteLoadBalancer("nope"); !errors.Is(err, winkernel.ErrNotFound) {
		t.Errorf("delete of an unknown LB: %v, want ErrNotFound", err)
	}
}

func TestFakeUpdateAndFaults(t *testing.T) {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	id := f.AddPod("pod1", pod1)
	lb, err := f.HNS.CreateLoadBalancer(newLB(id))
	if err != nil {
		t.Fatal(err)
	}
	changed := newLB(id)
	changed.Distribution = winkernel.DistributionSourceIP
	if _, err := f.HNS.UpdateLoadBalancer(lb.ID, changed); err != nil {
		t.Fatal(err)
	}
	f.SetFeatures(winkernel.Features{})
	if _, err := f.HNS.UpdateLoadBalancer(lb.ID, changed); !errors.Is(err, winkernel.ErrNotImplemented) {
		t.Errorf("update without the feature: %v, want ErrNotImplemented", err)
	}
	boom := errors.New("boom")
	f.HNS.FailOn("ListLoadBalancers", 1, boom)
	if _, err := f.HNS.ListLoadBalancers(); !errors.Is(err, boom) {
		t.Errorf("injected fault: %v", err)
	}
	if _, err := f.HNS.ListLoadBalancers(); err != nil {
		t.Errorf("after the fault: %v", err)
	}
	if n := f.HNS.CallsOf("ListLoadBalancers"); n != 2 {
		t.Errorf("%d list calls counted, want 2", n)
	}
	f.HNS.LeakDeletes(1)
	if err := f.HNS.DeleteLoadBalancer(lb.ID); err != nil {
		t.Fatal(err)
	}
	if len(f.HNS.LoadBalancers()) != 1 {
		t.Error("a leaked delete removed the LB")
	}
	if !f.HNS.DeleteOutOfBand(lb.ID) || len(f.HNS.LoadBalancers()) != 0 {
		t.Error("out-of-band delete")
	}
}

func TestTracer(t *testing.T) {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	id := f.AddPod("pod1", pod1)
	lb := newLB(id)
	lb.Distribution = winkernel.DistributionSourceIP
	if _, err := f.HNS.CreateLoadBalancer(lb); err != nil {
		t.Fatal(err)
	}
	node := netip.MustParseAddr("192.168.50.10")
	np := winkernel.LoadBalancer{SourceVIP: node, Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 30080,
		EndpointIDs: []string{id}, Flags: winkernel.FlagVipExternalIP | winkernel.FlagLocalRoutedVIP | winkernel.FlagDSR}
	if _, err := f.HNS.CreateLoadBalancer(np); err != nil {
		t.Fatal(err)
	}
	tr := winkerneltest.NewTracer(f, winkerneltest.TracerConfig{NodeIPs: []netip.Addr{node}})
	client := netip.MustParseAddr("10.244.1.9")
	for _, tc := range []struct {
		p    proxytest.Packet
		want proxytest.Result
	}{
		{proxytest.Packet{Origin: proxytest.FromPod, Src: client, Dst: vip, Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.StickyTo(false, netip.AddrPortFrom(pod1, 8080))},
		{proxytest.Packet{Origin: proxytest.FromNode, Src: node, Dst: vip, Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.StickyTo(true, netip.AddrPortFrom(pod1, 8080))},
		{proxytest.Packet{Origin: proxytest.FromExternal, Src: netip.MustParseAddr("203.0.113.10"), Dst: node, Port: 30080, Protocol: v1.ProtocolTCP},
			proxytest.ForwardedTo(false, netip.AddrPortFrom(pod1, 8080))},
		{proxytest.Packet{Origin: proxytest.FromPod, Src: client, Dst: vip, Port: 81, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.NotProxied}},
		{proxytest.Packet{Origin: proxytest.FromPod, Src: client, Dst: vip, Port: 80, Protocol: v1.ProtocolUDP},
			proxytest.Result{Verdict: proxytest.NotProxied}},
	} {
		got, err := tr.Trace(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equal(tc.want) {
			t.Errorf("%s: got %s, want %s", tc.p, got, tc.want)
		}
	}
}
