package xtablestest

import (
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

var (
	nodeIP    = netip.MustParseAddr("192.168.0.10")
	podCIDR   = netip.MustParsePrefix("10.180.0.0/24")
	testNodes = TracerConfig{
		NodeIPs:           []netip.Addr{nodeIP},
		PodInterface:      "cbr0",
		ExternalInterface: "eth0",
		Routes:            []Route{{Prefix: podCIDR, Interface: "cbr0"}},
	}
)

func loadFixture(t *testing.T, name string, family v1.IPFamily) *Fake {
	t.Helper()
	text, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFakeFromDump(family, string(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func pkt(origin proxytest.Origin, src, dst string, port int) proxytest.Packet {
	return proxytest.Packet{Origin: origin, Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Port: port, Protocol: v1.ProtocolTCP}
}

func TestTraceKubeProxyRuleset(t *testing.T) {
	f := loadFixture(t, "kubeproxy-v4.restore", v1.IPv4Protocol)
	tr := NewTracer(f, testNodes)
	fwd := func(masq, sticky bool, backends ...string) proxytest.Result {
		r := proxytest.Result{Verdict: proxytest.Forwarded, Masquerade: masq, Sticky: sticky}
		for _, b := range backends {
			r.Backends = append(r.Backends, ap(b))
		}
		return r
	}
	cases := []struct {
		name string
		p    proxytest.Packet
		want proxytest.Result
	}{
		{"cluster IP from pod: both endpoints, no masquerade",
			pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.41", 80), fwd(false, false, "10.180.0.1:80", "10.180.0.2:80")},
		{"cluster IP from outside the cluster CIDR is masqueraded",
			pkt(proxytest.FromExternal, "1.2.3.4", "172.30.0.41", 80), fwd(true, false, "10.180.0.1:80", "10.180.0.2:80")},
		{"cluster IP hairpin: the path back to the client pod is masqueraded",
			pkt(proxytest.FromPod, "10.180.0.1", "172.30.0.41", 80), fwd(true, false, "10.180.0.1:80", "10.180.0.2:80")},
		{"cluster IP from the node is masqueraded",
			pkt(proxytest.FromNode, "192.168.0.10", "172.30.0.41", 80), fwd(true, false, "10.180.0.1:80", "10.180.0.2:80")},
		{"cluster IP, wrong port: not a service",
			pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.41", 81), proxytest.Result{Verdict: proxytest.NotProxied}},
		{"node port from outside",
			pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 3001), fwd(true, false, "10.180.1.3:80")},
		{"node port from a pod",
			pkt(proxytest.FromPod, "10.180.0.9", "192.168.0.10", 3001), fwd(true, false, "10.180.1.3:80")},
		{"node port on localhost from the node",
			pkt(proxytest.FromNode, "127.0.0.1", "127.0.0.1", 3001), fwd(true, false, "10.180.1.3:80")},
		{"load balancer from an allowed source range",
			pkt(proxytest.FromExternal, "203.0.113.5", "5.6.7.8", 80), fwd(true, false, "10.180.0.4:80")},
		{"load balancer from outside the source ranges is dropped",
			pkt(proxytest.FromExternal, "198.51.100.1", "5.6.7.8", 80), proxytest.Result{Verdict: proxytest.Dropped}},
		{"eTP Local node port from outside: local endpoint only, client IP kept",
			pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 3004), fwd(false, false, "10.180.0.5:80")},
		{"eTP Local node port from a pod: every endpoint",
			pkt(proxytest.FromPod, "10.180.0.9", "192.168.0.10", 3004), fwd(false, false, "10.180.0.5:80", "10.180.1.6:80")},
		{"eTP Local node port from the node: every endpoint, masqueraded",
			pkt(proxytest.FromNode, "192.168.0.10", "192.168.0.10", 3004), fwd(true, false, "10.180.0.5:80", "10.180.1.6:80")},
		{"eTP Local cluster IP: every endpoint",
			pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.44", 80), fwd(false, false, "10.180.0.5:80", "10.180.1.6:80")},
		{"session affinity",
			pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.45", 80), fwd(false, true, "10.180.0.7:80", "10.180.0.8:80")},
		{"no endpoints: cluster IP rejected",
			pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.46", 80), proxytest.Result{Verdict: proxytest.Rejected}},
		{"no endpoints: cluster IP from the node rejected",
			pkt(proxytest.FromNode, "192.168.0.10", "172.30.0.46", 80), proxytest.Result{Verdict: proxytest.Rejected}},
		{"no endpoints: node port rejected",
			pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 3006), proxytest.Result{Verdict: proxytest.Rejected}},
		{"eTP Local without local endpoints: node port from outside dropped",
			pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 3007), proxytest.Result{Verdict: proxytest.Dropped}},
		{"eTP Local without local endpoints: node port from a pod still works",
			pkt(proxytest.FromPod, "10.180.0.9", "192.168.0.10", 3007), fwd(false, false, "10.180.1.9:80")},
		{"not a service",
			pkt(proxytest.FromPod, "10.180.0.9", "8.8.8.8", 53), proxytest.Result{Verdict: proxytest.NotProxied}},
		{"external traffic to localhost that is not a node port is dropped (KUBE-FIREWALL)",
			pkt(proxytest.FromExternal, "1.2.3.4", "127.0.0.1", 22), proxytest.Result{Verdict: proxytest.Dropped}},
		{"node to itself, not a service",
			pkt(proxytest.FromNode, "127.0.0.1", "127.0.0.1", 22), proxytest.Result{Verdict: proxytest.NotProxied}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tr.Trace(tc.p)
			if err != nil {
				t.Fatalf("Trace: %v", err)
			}
			if !resultEqual(got, tc.want) {
				all, _ := tr.TraceAll(tc.p)
				t.Errorf("Trace(%s) = %+v\nwant %+v\npaths:\n%s", packetString(tc.p), got, tc.want, describe(all))
			}
		})
	}
}

func resultEqual(a, b proxytest.Result) bool {
	return a.Verdict == b.Verdict && a.Masquerade == b.Masquerade && a.Sticky == b.Sticky && slices.Equal(a.Backends, b.Backends)
}

func describe(t Trace) string {
	var b strings.Builder
	for i, p := range t.Paths {
		b.WriteString("path ")
		b.WriteString(p.Verdict.String())
		b.WriteString(" ")
		b.WriteString(p.Backend.String())
		b.WriteString("\n")
		for _, r := range p.Rules {
			b.WriteString("  " + r + "\n")
		}
		_ = i
	}
	return b.String()
}

func TestTraceAllPaths(t *testing.T) {
	f := loadFixture(t, "kubeproxy-v4.restore", v1.IPv4Protocol)
	tr := NewTracer(f, testNodes)
	all, err := tr.TraceAll(pkt(proxytest.FromPod, "10.180.0.1", "172.30.0.41", 80))
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Paths) != 2 {
		t.Fatalf("want 2 paths, got:\n%s", describe(all))
	}
	byBackend := map[netip.AddrPort]Path{}
	for _, p := range all.Paths {
		byBackend[p.Backend] = p
	}
	hairpin, other := byBackend[ap("10.180.0.1:80")], byBackend[ap("10.180.0.2:80")]
	if !hairpin.Masquerade || other.Masquerade {
		t.Errorf("masquerade: hairpin %v, other %v; want true, false", hairpin.Masquerade, other.Masquerade)
	}
	if hairpin.Local || other.Local {
		t.Error("pod endpoints reported as local delivery")
	}
	want := `nat KUBE-SERVICES: -d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp --dport 80 -j KUBE-SVC-SVC1`
	if !slices.Contains(hairpin.Rules, want) {
		t.Errorf("rules of the path lack %q:\n%s", want, strings.Join(hairpin.Rules, "\n"))
	}
	if !slices.Contains(hairpin.Rules, "nat KUBE-POSTROUTING: -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully") {
		t.Errorf("hairpin path does not show the MASQUERADE rule:\n%s", strings.Join(hairpin.Rules, "\n"))
	}
}

func TestTraceAmbiguous(t *testing.T) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, `*nat
:KUBE-SVC-X - [0:0]
-A PREROUTING -d 172.30.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-X
-A KUBE-SVC-X -m statistic --mode random --probability 0.5 -p tcp -j DNAT --to-destination 10.0.0.1:80
COMMIT
*filter
-A FORWARD -d 10.0.0.1/32 -j ACCEPT
-P FORWARD DROP
COMMIT
`)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(f, TracerConfig{})
	_, err = tr.Trace(pkt(proxytest.FromPod, "10.1.0.1", "172.30.0.1", 80))
	var amb *AmbiguousError
	if !errors.As(err, &amb) {
		t.Fatalf("err = %v, want *AmbiguousError", err)
	}
	verdicts := map[proxytest.Verdict]bool{}
	for _, p := range amb.Trace.Paths {
		verdicts[p.Verdict] = true
	}
	if !verdicts[proxytest.Forwarded] || !verdicts[proxytest.Dropped] || len(verdicts) != 2 {
		t.Errorf("paths: %s", describe(amb.Trace))
	}
	if !strings.Contains(err.Error(), "forwarded 10.0.0.1:80") || !strings.Contains(err.Error(), "dropped") {
		t.Errorf("error does not show the paths: %v", err)
	}
}

func TestTraceErrors(t *testing.T) {
	cases := []struct {
		name, rules string
		cfg         TracerConfig
		p           proxytest.Packet
		want        string
	}{
		{"unknown match", "*filter\n-A FORWARD -m hashlimit --hashlimit-upto 5/sec -j ACCEPT\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), `match "hashlimit"`},
		{"unknown target", "*filter\n-A FORWARD -j NFQUEUE --queue-num 1\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), `target "NFQUEUE"`},
		{"source port unknown", "*filter\n-A FORWARD -p tcp --sport 1000 -j DROP\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), "SourcePort"},
		{"ipset without lookup", "*filter\n-A FORWARD -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), "IPSetMatch"},
		{"DNAT to a range", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 10.0.0.1-10.0.0.3\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), "range"},
		{"MASQUERADE outside POSTROUTING", "*nat\n:X - [0:0]\n-A PREROUTING -j X\n-A X -j MASQUERADE\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80), "POSTROUTING"},
		{"wrong family packet", "*nat\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "fd00::1", "fd00::2", 80), "not IPv4"},
		{"bad port", "*nat\nCOMMIT\n", TracerConfig{},
			pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 0), "port"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFakeFromDump(v1.IPv4Protocol, tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewTracer(f, tc.cfg).Trace(tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
			if unsupported := tc.want == `match "hashlimit"` || tc.want == `target "NFQUEUE"` || tc.want == "range"; unsupported != errors.Is(err, ErrUnsupported) {
				t.Errorf("errors.Is(%v, ErrUnsupported) = %v", err, !unsupported)
			}
		})
	}
}

func TestTraceIPSetAndMarks(t *testing.T) {
	// The shape of the ipvs engine's iptables rules: ipsets decide.
	f, err := NewFakeFromDump(v1.IPv4Protocol, `*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES ! -s 10.0.0.0/8 -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -j MASQUERADE
COMMIT
`)
	if err != nil {
		t.Fatal(err)
	}
	var queries []IPSetQuery
	cfg := TracerConfig{IPSetMatch: func(q IPSetQuery) (bool, error) {
		queries = append(queries, q)
		return q.Set == "KUBE-CLUSTER-IP" && q.Addrs[0] == netip.MustParseAddr("172.30.0.1") && q.Ports[1] == 80 && q.Protocol == v1.ProtocolTCP, nil
	}}
	tr := NewTracer(f, cfg)
	res, err := tr.Trace(pkt(proxytest.FromExternal, "1.2.3.4", "172.30.0.1", 80))
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != proxytest.NotProxied || !res.Masquerade {
		t.Errorf("result = %+v (ipvs does the DNAT; iptables only marks and masquerades)", res)
	}
	if len(queries) == 0 || !slices.Equal(queries[0].Flags, []string{"dst", "dst"}) {
		t.Errorf("queries = %+v", queries)
	}
	res, err = tr.Trace(pkt(proxytest.FromPod, "10.1.0.1", "172.30.0.1", 80))
	if err != nil || res.Masquerade {
		t.Errorf("pod source: %+v, %v", res, err)
	}
}

func TestTraceIPv6(t *testing.T) {
	f, err := NewFakeFromDump(v1.IPv6Protocol, `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-X - [0:0]
:KUBE-SEP-A - [0:0]
-A OUTPUT -j KUBE-SERVICES
-A KUBE-SERVICES -d fd00:30::1/128 -p udp -m udp --dport 53 -j KUBE-SVC-X
-A KUBE-SVC-X -j KUBE-SEP-A
-A KUBE-SEP-A -p udp -m udp -j DNAT --to-destination [fd00:180::5]:5353
COMMIT
`)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(f, TracerConfig{NodeIPs: []netip.Addr{netip.MustParseAddr("fd00::10")}})
	p := proxytest.Packet{Origin: proxytest.FromNode, Src: netip.MustParseAddr("fd00::10"), Dst: netip.MustParseAddr("fd00:30::1"), Port: 53, Protocol: v1.ProtocolUDP}
	res, err := tr.Trace(p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != proxytest.Forwarded || !slices.Equal(res.Backends, []netip.AddrPort{ap("[fd00:180::5]:5353")}) {
		t.Errorf("result = %+v", res)
	}
	p.Protocol = v1.ProtocolTCP
	if res, err := tr.Trace(p); err != nil || res.Verdict != proxytest.NotProxied {
		t.Errorf("TCP to a UDP service: %+v, %v", res, err)
	}
}

func TestTraceGotoAndPolicies(t *testing.T) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, `*filter
:A - [0:0]
:B - [0:0]
-A INPUT -g A
-A INPUT -j ACCEPT
-A A -s 10.0.0.0/8 -j B
-A A -s 10.1.0.0/16 -j DROP
-A B -s 10.2.0.0/16 -j RETURN
-A B -j REJECT --reject-with icmp-port-unreachable
-P INPUT DROP
COMMIT
`)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracer(f, TracerConfig{NodeIPs: []netip.Addr{nodeIP}})
	cases := map[string]proxytest.Verdict{
		"10.3.0.1":    proxytest.Rejected, // A -> B -> REJECT
		"10.2.0.1":    proxytest.Dropped,  // B returns to A, A falls off: goto returns past INPUT's next rule to the policy
		"192.168.1.1": proxytest.Dropped,  // A falls off; -g means INPUT's "-j ACCEPT" is skipped
	}
	for src, want := range cases {
		res, err := tr.Trace(pkt(proxytest.FromExternal, src, "192.168.0.10", 22))
		if err != nil || res.Verdict != want {
			t.Errorf("from %s: %+v, %v; want %s", src, res, err, want)
		}
	}
}
