package xtablestest_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// topologyRuleset writes, in kube-proxy's shape, rules for services on the
// conformance topology (proxytest.DefaultTopology, either family):
//
//	ServiceIP(10):80   ClusterIP -> pod-a1:8080, pod-a2:8080
//	NodeIP:30080       NodePort (eTP Cluster) -> pod-b1:80
//	NodeIP:30081       NodePort (eTP Local) -> pod-a1:80 local, pod-b2:80 remote
//	ServiceIP(11):80   ClusterIP, no endpoints
//	LoadBalancerIP(10):80  LoadBalancer, source range ExternalClient -> pod-a2:80
//	ServiceIP(12):80   ClusterIP, ClientIP affinity -> pod-a1:80, pod-a2:80
func topologyRuleset(topo proxytest.Topology) string {
	a1, a2 := topo.LocalPods[0].IP, topo.LocalPods[1].IP
	b1, b2 := topo.RemotePods[0].IP, topo.RemotePods[1].IP
	at := func(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }
	cidr, node := topo.ClusterCIDR, topo.NodeIP
	text := fmt.Sprintf(`*filter
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
-A INPUT -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
-A FORWARD -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
-A FORWARD -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -j KUBE-SERVICES
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-SERVICES -m comment --comment "ns/none:p has no endpoints" -p tcp -d 10.96.0.11 --dport 80 -j REJECT
-A KUBE-PROXY-FIREWALL -m comment --comment "ns/lb:p traffic not accepted by KUBE-FW-LB" -p tcp -d 192.0.2.10 --dport 80 -j DROP
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SVC-CIP - [0:0]
:KUBE-SEP-CIP1 - [0:0]
:KUBE-SEP-CIP2 - [0:0]
:KUBE-EXT-NP - [0:0]
:KUBE-SVC-NP - [0:0]
:KUBE-SEP-NP1 - [0:0]
:KUBE-EXT-LOC - [0:0]
:KUBE-SVC-LOC - [0:0]
:KUBE-SVL-LOC - [0:0]
:KUBE-SEP-LOC1 - [0:0]
:KUBE-SEP-LOC2 - [0:0]
:KUBE-FW-LB - [0:0]
:KUBE-EXT-LB - [0:0]
:KUBE-SVC-LB - [0:0]
:KUBE-SEP-LB1 - [0:0]
:KUBE-SVC-AFF - [0:0]
:KUBE-SEP-AFF1 - [0:0]
:KUBE-SEP-AFF2 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -j MASQUERADE
-A KUBE-SERVICES -p tcp -d 10.96.0.10 --dport 80 -j KUBE-SVC-CIP
-A KUBE-SERVICES -p tcp -d 192.0.2.10 --dport 80 -j KUBE-FW-LB
-A KUBE-SERVICES -p tcp -d 10.96.0.12 --dport 80 -j KUBE-SVC-AFF
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
-A KUBE-NODEPORTS -p tcp --dport 30080 -j KUBE-EXT-NP
-A KUBE-NODEPORTS -p tcp --dport 30081 -j KUBE-EXT-LOC
-A KUBE-SVC-CIP ! -s %[1]s -p tcp -d 10.96.0.10 --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-CIP -m statistic --mode random --probability 0.5 -j KUBE-SEP-CIP1
-A KUBE-SVC-CIP -j KUBE-SEP-CIP2
-A KUBE-SEP-CIP1 -s %[2]s -j KUBE-MARK-MASQ
-A KUBE-SEP-CIP1 -p tcp -j DNAT --to-destination %[8]s
-A KUBE-SEP-CIP2 -s %[3]s -j KUBE-MARK-MASQ
-A KUBE-SEP-CIP2 -p tcp -j DNAT --to-destination %[9]s
-A KUBE-EXT-NP -j KUBE-MARK-MASQ
-A KUBE-EXT-NP -j KUBE-SVC-NP
-A KUBE-SVC-NP -j KUBE-SEP-NP1
-A KUBE-SEP-NP1 -p tcp -j DNAT --to-destination %[10]s
-A KUBE-EXT-LOC -s %[1]s -j KUBE-SVC-LOC
-A KUBE-EXT-LOC -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
-A KUBE-EXT-LOC -m addrtype --src-type LOCAL -j KUBE-SVC-LOC
-A KUBE-EXT-LOC -j KUBE-SVL-LOC
-A KUBE-SVC-LOC -m statistic --mode random --probability 0.5 -j KUBE-SEP-LOC1
-A KUBE-SVC-LOC -j KUBE-SEP-LOC2
-A KUBE-SVL-LOC -j KUBE-SEP-LOC1
-A KUBE-SEP-LOC1 -p tcp -j DNAT --to-destination %[11]s
-A KUBE-SEP-LOC2 -p tcp -j DNAT --to-destination %[12]s
-A KUBE-FW-LB -s %[6]s -j KUBE-EXT-LB
-A KUBE-EXT-LB -j KUBE-MARK-MASQ
-A KUBE-EXT-LB -j KUBE-SVC-LB
-A KUBE-SVC-LB -j KUBE-SEP-LB1
-A KUBE-SEP-LB1 -p tcp -j DNAT --to-destination %[13]s
-A KUBE-SVC-AFF -m recent --name KUBE-SEP-AFF1 --rcheck --seconds 10800 --reap -j KUBE-SEP-AFF1
-A KUBE-SVC-AFF -m recent --name KUBE-SEP-AFF2 --rcheck --seconds 10800 --reap -j KUBE-SEP-AFF2
-A KUBE-SVC-AFF -m statistic --mode random --probability 0.5 -j KUBE-SEP-AFF1
-A KUBE-SVC-AFF -j KUBE-SEP-AFF2
-A KUBE-SEP-AFF1 -p tcp -m recent --set --name KUBE-SEP-AFF1 -j DNAT --to-destination %[11]s
-A KUBE-SEP-AFF2 -p tcp -m recent --set --name KUBE-SEP-AFF2 -j DNAT --to-destination %[13]s
COMMIT
`, cidr, a1, a2, b1, b2, proxytest.HostPrefix(topo.ExternalClient), node,
		at(a1, 8080), at(a2, 8080), at(b1, 80), at(a1, 80), at(b2, 80), at(a2, 80))
	return strings.NewReplacer(
		"10.96.0.10", topo.ServiceIP(10).String(),
		"10.96.0.11", topo.ServiceIP(11).String(),
		"10.96.0.12", topo.ServiceIP(12).String(),
		"192.0.2.10", topo.LoadBalancerIP(10).String(),
	).Replace(text)
}

type topologyCase struct {
	name string
	p    proxytest.Packet
	want proxytest.Result
}

func topologyCases(topo proxytest.Topology) []topologyCase {
	a1, a2 := topo.LocalPods[0].IP, topo.LocalPods[1].IP
	b1, b2 := topo.RemotePods[0].IP, topo.RemotePods[1].IP
	client := topo.ClientPod.IP
	pk := func(o proxytest.Origin, src netip.Addr, dst netip.Addr, port int) proxytest.Packet {
		return proxytest.Packet{Origin: o, Src: src, Dst: dst, Port: port, Protocol: v1.ProtocolTCP}
	}
	node, cip, none, aff, lb := topo.NodeIP, topo.ServiceIP(10), topo.ServiceIP(11), topo.ServiceIP(12), topo.LoadBalancerIP(10)
	fwd := func(masq, sticky bool, bs ...netip.AddrPort) proxytest.Result {
		return proxytest.Result{Verdict: proxytest.Forwarded, Backends: bs, Masquerade: masq, Sticky: sticky}
	}
	at := netip.AddrPortFrom
	return []topologyCase{
		{"cluster IP from a pod", pk(proxytest.FromPod, client, cip, 80), fwd(false, false, at(a1, 8080), at(a2, 8080))},
		{"cluster IP from the node", pk(proxytest.FromNode, topo.NodeIP, cip, 80), fwd(true, false, at(a1, 8080), at(a2, 8080))},
		{"node port from outside", pk(proxytest.FromExternal, topo.ExternalClient, node, 30080), fwd(true, false, at(b1, 80))},
		{"eTP Local node port from outside", pk(proxytest.FromExternal, topo.ExternalClient, node, 30081), fwd(false, false, at(a1, 80))},
		{"eTP Local node port from a pod", pk(proxytest.FromPod, client, node, 30081), fwd(false, false, at(a1, 80), at(b2, 80))},
		{"no endpoints", pk(proxytest.FromPod, client, none, 80), proxytest.Result{Verdict: proxytest.Rejected}},
		{"load balancer, allowed source", pk(proxytest.FromExternal, topo.ExternalClient, lb, 80), fwd(true, false, at(a2, 80))},
		{"load balancer, other source", pk(proxytest.FromExternal, topo.ExternalClient2, lb, 80), proxytest.Result{Verdict: proxytest.Dropped}},
		{"session affinity", pk(proxytest.FromPod, client, aff, 80), fwd(false, true, at(a1, 80), at(a2, 80))},
		{"not a service", pk(proxytest.FromPod, client, topo.World, 80), proxytest.Result{Verdict: proxytest.NotProxied}},
	}
}

// TestTracerOnConformanceTopology: the expectations the real-kernel test
// (TestTracerAgreesWithKernel) checks with real packets hold for the Tracer.
func TestTracerOnConformanceTopology(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(family)
		fake, err := xtablestest.NewFakeFromDump(family, topologyRuleset(topo))
		if err != nil {
			t.Fatal(err)
		}
		tr := xtablestest.NewTracer(fake, xtablestest.TracerConfigFor(topo))
		for _, tc := range topologyCases(topo) {
			got, err := tr.Trace(tc.p)
			if err != nil {
				t.Errorf("%s %s: %v", family, tc.name, err)
				continue
			}
			if !got.Equal(tc.want) {
				t.Errorf("%s %s: tracer says %s, want %s", family, tc.name, got, tc.want)
			}
		}
	}
}
