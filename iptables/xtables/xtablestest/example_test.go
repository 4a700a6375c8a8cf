package xtablestest_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// The Fake applies iptables-restore input and prints the state as
// iptables-save does.
func ExampleFake() {
	ctx := context.Background()
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	var runner xtables.Runner = fake // what the engine is given

	err := runner.Restore(ctx, xtables.RestoreInput{Text: []byte(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
`)})
	if err != nil {
		fmt.Println(err)
	}
	// A jump to a chain that does not exist is refused, as by the kernel.
	err = runner.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n-A KUBE-SERVICES -j KUBE-SVC-NOPE\nCOMMIT\n")})
	fmt.Println(err)

	fmt.Print(fake.Dump())
	// Output:
	// iptables-restore failed at line 2 ("-A KUBE-SERVICES -j KUBE-SVC-NOPE"): no chain/target/match by that name: jump target "KUBE-SVC-NOPE" does not exist in table "nat"
	// *nat
	// :PREROUTING ACCEPT [0:0]
	// :INPUT ACCEPT [0:0]
	// :OUTPUT ACCEPT [0:0]
	// :POSTROUTING ACCEPT [0:0]
	// :KUBE-MARK-MASQ - [0:0]
	// :KUBE-SERVICES - [0:0]
	// -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
	// -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
	// COMMIT
}

// Seed a Fake from iptables-save text, then trace packets through it.
func ExampleTracer() {
	fake, err := xtablestest.NewFakeFromDump(v1.IPv4Protocol, `*nat
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SVC-WEB - [0:0]
:KUBE-SEP-WEB1 - [0:0]
:KUBE-SEP-WEB2 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A OUTPUT -j KUBE-SERVICES
-A POSTROUTING -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -j MASQUERADE
-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment "default/web cluster IP" -m tcp --dport 80 -j KUBE-SVC-WEB
-A KUBE-SVC-WEB ! -s 10.0.0.0/8 -d 172.30.0.41/32 -p tcp -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-WEB -m statistic --mode random --probability 0.5 -j KUBE-SEP-WEB1
-A KUBE-SVC-WEB -j KUBE-SEP-WEB2
-A KUBE-SEP-WEB1 -p tcp -m tcp -j DNAT --to-destination 10.180.0.1:8080
-A KUBE-SEP-WEB2 -p tcp -m tcp -j DNAT --to-destination 10.180.0.2:8080
COMMIT
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	tracer := xtablestest.NewTracer(fake, xtablestest.TracerConfig{
		NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
	})
	for _, p := range []proxytest.Packet{
		{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.180.0.9"), Dst: netip.MustParseAddr("172.30.0.41"), Port: 80, Protocol: v1.ProtocolTCP},
		{Origin: proxytest.FromNode, Src: netip.MustParseAddr("192.168.0.10"), Dst: netip.MustParseAddr("172.30.0.41"), Port: 80, Protocol: v1.ProtocolTCP},
		{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.180.0.9"), Dst: netip.MustParseAddr("172.30.0.41"), Port: 443, Protocol: v1.ProtocolTCP},
	} {
		res, err := tracer.Trace(p)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s %s -> %s:%d: %s %v masquerade=%v\n", p.Origin, p.Src, p.Dst, p.Port, res.Verdict, res.Backends, res.Masquerade)
	}
	// Output:
	// pod 10.180.0.9 -> 172.30.0.41:80: forwarded [10.180.0.1:8080 10.180.0.2:8080] masquerade=false
	// node 192.168.0.10 -> 172.30.0.41:80: forwarded [10.180.0.1:8080 10.180.0.2:8080] masquerade=true
	// pod 10.180.0.9 -> 172.30.0.41:443: not-proxied [] masquerade=false
}

// TraceAll explains a trace: every path, with the rules it hit.
func ExampleTracer_TraceAll() {
	fake, err := xtablestest.NewFakeFromDump(v1.IPv4Protocol, `*nat
:KUBE-SVC-DNS - [0:0]
-A PREROUTING -d 172.30.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-DNS
-A KUBE-SVC-DNS -p udp -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.180.0.5:53
-A KUBE-SVC-DNS -p udp -j DNAT --to-destination 10.180.0.6:53
COMMIT
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	trace, err := xtablestest.NewTracer(fake, xtablestest.TracerConfig{}).TraceAll(proxytest.Packet{
		Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.180.0.9"),
		Dst: netip.MustParseAddr("172.30.0.10"), Port: 53, Protocol: v1.ProtocolUDP,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, path := range trace.Paths {
		fmt.Println(path.Verdict, path.Backend)
		for _, rule := range path.Rules {
			fmt.Println("  ", rule)
		}
	}
	// Output:
	// forwarded 10.180.0.6:53
	//    nat PREROUTING: -d 172.30.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-DNS
	//    nat KUBE-SVC-DNS: -p udp -j DNAT --to-destination 10.180.0.6:53
	//    nat POSTROUTING: policy ACCEPT
	// forwarded 10.180.0.5:53
	//    nat PREROUTING: -d 172.30.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-DNS
	//    nat KUBE-SVC-DNS: -p udp -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 10.180.0.5:53
	//    nat POSTROUTING: policy ACCEPT
}

// Tests of an engine inject a failed restore (the verbs of
// proxytest.Faults) and check what was written.
func ExampleFake_FailOn() {
	ctx := context.Background()
	fake := xtablestest.NewFake(v1.IPv4Protocol)
	fake.FailOn("Restore", 1, errors.New("xtables lock held"))

	rules := []byte("*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n")
	fmt.Println("first:", fake.Restore(ctx, xtables.RestoreInput{Text: rules}))
	fmt.Println("retry:", fake.Restore(ctx, xtables.RestoreInput{Text: rules}))

	st := fake.Stats()
	fmt.Printf("restores=%d failed=%d lines=%d calls=%d\n", st.Restores, st.FailedRestores, st.RestoreLines, fake.CallsOf("Restore"))
	rulesNow, _ := fake.Rules(xtables.TableNAT, xtables.ChainPrerouting)
	fmt.Println(rulesNow)
	// Output:
	// first: xtables lock held
	// retry: <nil>
	// restores=2 failed=1 lines=8 calls=2
	// [-j KUBE-SERVICES]
}
