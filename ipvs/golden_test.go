package ipvs_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func TestGoldenClusterIP(t *testing.T) {
	e := newEnv(t, ipvs.Config{Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.244.0.0/16")}}})
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withAffinity(600)))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.p.OnServiceAdd(service("kube-system", "dns", "10.96.0.53", 53, withProto(v1.ProtocolUDP), withScheduler("lc")))
	e.p.OnEndpointSliceAdd(slice("kube-system", "dns", 5353, v1.ProtocolUDP, ready("10.244.1.7", testNode)))
	e.p.OnServiceAdd(service("default", "empty", "10.96.0.99", 443))
	e.synced()
	e.sync(t)
	golden(t, "clusterip", e.dump())

	tr := e.tracer()
	for _, tc := range []struct {
		name string
		p    proxytest.Packet
		want proxytest.Result
	}{
		{"pod to cluster IP", proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Sticky: true, Backends: aps("10.244.1.5:8080", "10.244.2.6:8080")}},
		{"node to cluster IP is masqueraded", proxytest.Packet{Origin: proxytest.FromNode, Src: nodeIP, Dst: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Sticky: true, Masquerade: true, Backends: aps("10.244.1.5:8080", "10.244.2.6:8080")}},
		{"hairpin is masqueraded", proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.7"), Dst: netip.MustParseAddr("10.96.0.53"), Port: 53, Protocol: v1.ProtocolUDP},
			proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: true, Backends: aps("10.244.1.7:5353")}},
		{"no endpoints rejects", proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.99"), Port: 443, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Rejected}},
		{"other port of a service IP rejects", proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.96.0.10"), Port: 22, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Rejected}},
		{"not a service", proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.244.1.9"), Dst: netip.MustParseAddr("10.244.2.6"), Port: 8080, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.NotProxied}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTrace(t, tr, tc.p, tc.want) })
	}
}

func TestGoldenExternal(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	e.p.OnServiceAdd(service("default", "np", "10.96.1.1", 80, withNodePort(30080)))
	e.p.OnEndpointSliceAdd(slice("default", "np", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.p.OnServiceAdd(service("default", "lb", "10.96.1.2", 443, withLB(30443, "203.0.113.7", "198.51.100.0/24", "203.0.113.0/24"), withETPLocal(31000)))
	e.p.OnEndpointSliceAdd(slice("default", "lb", 8443, v1.ProtocolTCP, ready("10.244.1.8", testNode), ready("10.244.2.9", "node-b")))
	e.p.OnServiceAdd(service("default", "ext", "10.96.1.3", 8000, withExternalIPs("198.51.100.50")))
	e.p.OnEndpointSliceAdd(slice("default", "ext", 8000, v1.ProtocolTCP, ready("10.244.2.10", "node-b")))
	e.p.OnServiceAdd(service("default", "sctp", "10.96.1.4", 9000, withProto(v1.ProtocolSCTP), withNodePort(30900)))
	e.p.OnEndpointSliceAdd(slice("default", "sctp", 9000, v1.ProtocolSCTP, ready("10.244.2.11", "node-b")))
	e.synced()
	e.sync(t)
	golden(t, "external", e.dump())

	tr := e.tracer()
	client := netip.MustParseAddr("198.51.100.20")
	outsider := netip.MustParseAddr("192.0.2.1")
	for _, tc := range []struct {
		name string
		p    proxytest.Packet
		want proxytest.Result
	}{
		{"node port from outside is masqueraded", proxytest.Packet{Origin: proxytest.FromExternal, Src: outsider, Dst: nodeIP, Port: 30080, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: true, Backends: aps("10.244.1.5:8080", "10.244.2.6:8080")}},
		{"LB from allowed source keeps the client, local endpoints only", proxytest.Packet{Origin: proxytest.FromExternal, Src: client, Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Backends: aps("10.244.1.8:8443")}},
		{"LB from other source is dropped", proxytest.Packet{Origin: proxytest.FromExternal, Src: outsider, Dst: netip.MustParseAddr("203.0.113.7"), Port: 443, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Dropped}},
		{"LB node port with eTP Local keeps the client", proxytest.Packet{Origin: proxytest.FromExternal, Src: outsider, Dst: nodeIP, Port: 30443, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Backends: aps("10.244.1.8:8443")}},
		{"external IP is masqueraded", proxytest.Packet{Origin: proxytest.FromExternal, Src: outsider, Dst: netip.MustParseAddr("198.51.100.50"), Port: 8000, Protocol: v1.ProtocolTCP},
			proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: true, Backends: aps("10.244.2.10:8000")}},
		{"SCTP node port", proxytest.Packet{Origin: proxytest.FromExternal, Src: outsider, Dst: nodeIP, Port: 30900, Protocol: v1.ProtocolSCTP},
			proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: true, Backends: aps("10.244.2.11:9000")}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkTrace(t, tr, tc.p, tc.want) })
	}
}

func TestGoldenIPv6(t *testing.T) {
	e := newEnv(t, ipvs.Config{Common: engine.Common{IPFamily: v1.IPv6Protocol}, Scheduler: "wrr"})
	e.p.OnServiceAdd(service("default", "web6", "fd00:96::10", 80, withNodePort(30081)))
	e.p.OnEndpointSliceAdd(slice("default", "web6", 8080, v1.ProtocolTCP, ready("fd00:244::5", testNode)))
	e.synced()
	e.sync(t)
	golden(t, "ipv6", e.dump())
	checkTrace(t, e.tracer(), proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("fd00:244::9"), Dst: netip.MustParseAddr("fd00:96::10"), Port: 80, Protocol: v1.ProtocolTCP},
		proxytest.Result{Verdict: proxytest.Forwarded, Backends: aps("[fd00:244::5]:8080")})
}

func aps(s ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, x := range s {
		out = append(out, netip.MustParseAddrPort(x))
	}
	return out
}

func checkTrace(t *testing.T, tr proxytest.Tracer, p proxytest.Packet, want proxytest.Result) {
	t.Helper()
	got, err := tr.Trace(p)
	if err != nil {
		t.Fatalf("Trace(%+v): %v", p, err)
	}
	if got.Verdict != want.Verdict || got.Masquerade != want.Masquerade || got.Sticky != want.Sticky || !equalAPs(got.Backends, want.Backends) {
		t.Errorf("Trace(%v %s -> %s:%d/%s) = %+v, want %+v", p.Origin, p.Src, p.Dst, p.Port, p.Protocol, got, want)
	}
}

func equalAPs(a, b []netip.AddrPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
