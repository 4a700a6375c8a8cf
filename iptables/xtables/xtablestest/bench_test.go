package xtablestest

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// kubeProxyRuleset renders a nat table shaped like kube-proxy's for
// services ClusterIP services with endpoints endpoints each.
func kubeProxyRuleset(services, endpoints int) string {
	var b strings.Builder
	b.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n")
	for s := 0; s < services; s++ {
		fmt.Fprintf(&b, ":KUBE-SVC-%08d - [0:0]\n", s)
		for e := 0; e < endpoints; e++ {
			fmt.Fprintf(&b, ":KUBE-SEP-%08d-%03d - [0:0]\n", s, e)
		}
	}
	b.WriteString("-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	b.WriteString("-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n")
	b.WriteString("-A POSTROUTING -j KUBE-POSTROUTING\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n")
	b.WriteString("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n-A KUBE-POSTROUTING -j MASQUERADE --random-fully\n")
	for s := 0; s < services; s++ {
		b.WriteString(serviceRules(s, endpoints, 0))
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func serviceRules(s, endpoints, gen int) string {
	var b strings.Builder
	vip := netip.AddrFrom4([4]byte{172, 30, byte(s >> 8), byte(s)})
	fmt.Fprintf(&b, "-A KUBE-SERVICES -m comment --comment \"ns/svc%d:p80 cluster IP\" -m tcp -p tcp -d %s --dport 80 -j KUBE-SVC-%08d\n", s, vip, s)
	fmt.Fprintf(&b, "-A KUBE-SVC-%08d -m comment --comment \"ns/svc%d:p80 cluster IP\" -m tcp -p tcp -d %s --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ\n", s, s, vip)
	for e := 0; e < endpoints; e++ {
		ep := netip.AddrFrom4([4]byte{10, byte(s >> 8), byte(s), byte(e + gen + 1)})
		if e < endpoints-1 {
			fmt.Fprintf(&b, "-A KUBE-SVC-%08d -m comment --comment \"ns/svc%d:p80 -> %s:80\" -m statistic --mode random --probability %.10f -j KUBE-SEP-%08d-%03d\n", s, s, ep, 1/float64(endpoints-e), s, e)
		} else {
			fmt.Fprintf(&b, "-A KUBE-SVC-%08d -m comment --comment \"ns/svc%d:p80 -> %s:80\" -j KUBE-SEP-%08d-%03d\n", s, s, ep, s, e)
		}
		fmt.Fprintf(&b, "-A KUBE-SEP-%08d-%03d -m comment --comment ns/svc%d:p80 -s %s -j KUBE-MARK-MASQ\n", s, e, s, ep)
		fmt.Fprintf(&b, "-A KUBE-SEP-%08d-%03d -m comment --comment ns/svc%d:p80 -m tcp -p tcp -j DNAT --to-destination %s:80\n", s, e, s, ep)
	}
	return b.String()
}

// A partial sync of one service in kube-proxy's style: redeclare (flush)
// its chains and write them again.
func partialSync(s, endpoints, gen int) string {
	var b strings.Builder
	b.WriteString("*nat\n")
	fmt.Fprintf(&b, ":KUBE-SVC-%08d - [0:0]\n", s)
	for e := 0; e < endpoints; e++ {
		fmt.Fprintf(&b, ":KUBE-SEP-%08d-%03d - [0:0]\n", s, e)
	}
	for _, line := range strings.SplitAfter(serviceRules(s, endpoints, gen), "\n") {
		if !strings.HasPrefix(line, "-A KUBE-SERVICES") {
			b.WriteString(line)
		}
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func TestGeneratedRulesetTraces(t *testing.T) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, kubeProxyRuleset(300, 3))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(ctx, xtables.RestoreInput{Text: []byte(partialSync(299, 3, 100))}); err != nil {
		t.Fatal(err)
	}
	res, err := NewTracer(f, TracerConfig{}).Trace(pkt(proxytest.FromPod, "10.99.0.1", "172.30.1.43", 80))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{ap("10.1.43.101:80"), ap("10.1.43.102:80"), ap("10.1.43.103:80")}
	if fmt.Sprint(res.Backends) != fmt.Sprint(want) || res.Verdict != proxytest.Forwarded {
		t.Errorf("got %+v, want backends %v", res, want)
	}
}

func BenchmarkRestoreFull(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		input := []byte(kubeProxyRuleset(n, 10))
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for i := 0; i < b.N; i++ {
				f := NewFake(v1.IPv4Protocol)
				if err := f.Restore(ctx, xtables.RestoreInput{Text: input}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRestorePartial(b *testing.B) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, kubeProxyRuleset(10000, 10))
	if err != nil {
		b.Fatal(err)
	}
	inputs := [][]byte{[]byte(partialSync(5000, 10, 0)), []byte(partialSync(5000, 10, 20))}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f.Restore(ctx, xtables.RestoreInput{Text: inputs[i%2]}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTrace(b *testing.B) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, kubeProxyRuleset(10000, 10))
	if err != nil {
		b.Fatal(err)
	}
	tr := NewTracer(f, TracerConfig{})
	p := pkt(proxytest.FromPod, "10.99.0.1", "172.30.19.136", 80) // service 5000
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := tr.Trace(p)
		if err != nil || len(res.Backends) != 10 {
			b.Fatalf("%+v, %v", res, err)
		}
	}
}

func BenchmarkDump(b *testing.B) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, kubeProxyRuleset(10000, 10))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = f.Dump()
	}
}
