package xtablestest

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

func TestTraceFeatures(t *testing.T) {
	node := []netip.Addr{nodeIP}
	notProxied := proxytest.Result{Verdict: proxytest.NotProxied}
	dropped := proxytest.Result{Verdict: proxytest.Dropped}
	rejected := proxytest.Result{Verdict: proxytest.Rejected}
	fwd := func(b ...string) proxytest.Result {
		r := proxytest.Result{Verdict: proxytest.Forwarded}
		for _, x := range b {
			r.Backends = append(r.Backends, ap(x))
		}
		return r
	}
	masq := func(r proxytest.Result) proxytest.Result { r.Masquerade = true; return r }
	sticky := func(r proxytest.Result) proxytest.Result { r.Sticky = true; return r }
	podToRemote := pkt(proxytest.FromPod, "10.180.0.9", "10.2.0.1", 80)
	cases := []struct {
		name  string
		rules string
		cfg   TracerConfig
		p     proxytest.Packet
		want  proxytest.Result
		paths int // when not 0, the number of paths TraceAll must give
	}{
		{"a new connection is never INVALID, RELATED or ESTABLISHED",
			"*filter\n-A FORWARD -m conntrack --ctstate INVALID -j DROP\n-A FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j DROP\n-A FORWARD -m state ! --state NEW -j DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, notProxied, 1},
		{"ctstate DNAT once DNAT'd",
			"*nat\n-A PREROUTING -p tcp -d 10.2.0.1 -j DNAT --to-destination 10.3.0.1\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate DNAT --ctorigdst 10.2.0.1 --ctorigdstport 80 -j ACCEPT\n-P FORWARD DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, fwd("10.3.0.1:80"), 1},
		{"ctstate DNAT not matched without DNAT",
			"*filter\n-A FORWARD -m conntrack --ctstate DNAT -j ACCEPT\n-P FORWARD DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, dropped, 1},
		{"multiport",
			"*filter\n-A FORWARD -p tcp -m multiport --dports 22,80,8000:8080 -j REJECT\nCOMMIT\n",
			TracerConfig{}, podToRemote, rejected, 1},
		{"multiport miss",
			"*filter\n-A FORWARD -p tcp -m multiport --dports 22,8000:8080 -j REJECT\nCOMMIT\n",
			TracerConfig{}, podToRemote, notProxied, 1},
		{"a new TCP connection is a SYN",
			"*filter\n-A FORWARD -p tcp ! --syn -j DROP\n-A FORWARD -p tcp --tcp-flags SYN,ACK SYN -j REJECT --reject-with tcp-reset\nCOMMIT\n",
			TracerConfig{}, podToRemote, rejected, 1},
		{"UDP is not TCP",
			"*filter\n-A FORWARD -p tcp -j DROP\nCOMMIT\n",
			TracerConfig{}, proxytest.Packet{Origin: proxytest.FromPod, Src: netip.MustParseAddr("10.180.0.9"), Dst: netip.MustParseAddr("10.2.0.1"), Port: 53, Protocol: v1.ProtocolUDP}, notProxied, 1},
		{"connmark set, restored, matched",
			"*mangle\n-A PREROUTING -j CONNMARK --set-mark 0x10\n-A PREROUTING -m connmark --mark 0x10 -j CONNMARK --restore-mark\nCOMMIT\n*filter\n-A FORWARD -m mark --mark 0x10/0xff -j DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, dropped, 1},
		{"NOTRACK skips the nat table",
			"*raw\n-A PREROUTING -d 10.2.0.1 -j NOTRACK\nCOMMIT\n*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.1:8080\nCOMMIT\n*filter\n-A FORWARD -m conntrack --ctstate UNTRACKED -j REJECT\nCOMMIT\n",
			TracerConfig{}, podToRemote, rejected, 1},
		{"masquerade mark counts when configured",
			"*nat\n-A PREROUTING -p tcp -j MARK --or-mark 0x4000\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.1:8080\nCOMMIT\n",
			TracerConfig{MasqueradeMark: Mark{Value: 0x4000, Mask: 0x4000}}, podToRemote, masq(fwd("10.3.0.1:8080")), 1},
		{"masquerade mark alone does not count by default",
			"*nat\n-A PREROUTING -p tcp -j MARK --or-mark 0x4000\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.1:8080\nCOMMIT\n",
			TracerConfig{}, podToRemote, fwd("10.3.0.1:8080"), 1},
		{"SNAT in POSTROUTING masquerades",
			"*nat\n-A POSTROUTING -o eth0 -j SNAT --to-source 192.168.0.10\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, podToRemote, masq(notProxied), 1},
		{"source port from the config",
			"*filter\n-A FORWARD -p tcp --sport 1000:2000 -j DROP\nCOMMIT\n",
			TracerConfig{SourcePort: 1234}, podToRemote, dropped, 1},
		{"source port from the packet wins",
			"*filter\n-A FORWARD -p tcp --sport 1000:2000 -j DROP\nCOMMIT\n",
			TracerConfig{SourcePort: 1234}, func() proxytest.Packet { p := podToRemote; p.SrcPort = 3000; return p }(), notProxied, 1},
		{"interface wildcard",
			"*filter\n-A FORWARD -i veth+ -o eth0 -j DROP\nCOMMIT\n",
			TracerConfig{PodInterface: "veth1234"}, podToRemote, dropped, 1},
		{"negated interface wildcard",
			"*filter\n-A FORWARD ! -i veth+ -j DROP\n-A FORWARD -i veth1234 ! -o eth1 -j REJECT\nCOMMIT\n",
			TracerConfig{PodInterface: "veth1234"}, podToRemote, rejected, 1},
		{"route to a pod interface",
			"*filter\n-A FORWARD -o cni0 -j REJECT\nCOMMIT\n",
			TracerConfig{Routes: []Route{{netip.MustParsePrefix("10.0.0.0/8"), "eth1"}, {netip.MustParsePrefix("10.2.0.0/16"), "cni0"}}}, podToRemote, rejected, 1},
		{"nat INPUT SNAT for local delivery",
			"*nat\n-A INPUT -p tcp --dport 80 -j SNAT --to-source 192.168.0.10\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 80), masq(notProxied), 1},
		{"physdev and limit match",
			"*filter\n-A FORWARD -m physdev --physdev-is-bridged -m limit --limit 5/sec -j DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, dropped, 1},
		{"address types",
			"*filter\n-A INPUT -m addrtype --dst-type MULTICAST -j DROP\n-A INPUT -m addrtype --src-type UNICAST --dst-type LOCAL -j REJECT\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 80), rejected, 1},
		{"recent set then checked on the same path is certain",
			"*nat\n-A PREROUTING -m recent --set --name A -j MARK --or-mark 0x1\n-A PREROUTING -p tcp -m recent --rcheck --name A --seconds 60 --reap -j DNAT --to-destination 10.3.0.1:80\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.2:80\nCOMMIT\n",
			TracerConfig{}, podToRemote, sticky(fwd("10.3.0.1:80")), 1},
		{"recent check of another list may go either way",
			"*nat\n-A PREROUTING -p tcp -m recent --rcheck --name B -j DNAT --to-destination 10.3.0.1:80\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.2:80\nCOMMIT\n",
			TracerConfig{}, podToRemote, sticky(fwd("10.3.0.1:80", "10.3.0.2:80")), 2},
		{"statistic probability 1 is certain, 0 never",
			"*nat\n-A PREROUTING -p tcp -m statistic --mode random --probability 0.0 -j DNAT --to-destination 10.3.0.9:80\n-A PREROUTING -p tcp -m statistic --mode random --probability 1.0 -j DNAT --to-destination 10.3.0.1:80\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.2:80\nCOMMIT\n",
			TracerConfig{}, podToRemote, fwd("10.3.0.1:80"), 1},
		{"statistic nth branches",
			"*nat\n-A PREROUTING -p tcp -m statistic --mode nth --every 2 --packet 0 -j DNAT --to-destination 10.3.0.1:80\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.2:80\nCOMMIT\n",
			TracerConfig{}, podToRemote, fwd("10.3.0.1:80", "10.3.0.2:80"), 2},
		{"DNAT without a port keeps the port",
			"*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 10.3.0.1\nCOMMIT\n",
			TracerConfig{}, podToRemote, fwd("10.3.0.1:80"), 1},
		{"node to a host-network endpoint is delivered locally, through filter INPUT on lo",
			"*nat\n-A OUTPUT -p tcp -d 172.30.0.1 -j DNAT --to-destination 192.168.0.10:8080\nCOMMIT\n*filter\n-A INPUT -i lo -p tcp --dport 8080 -j REJECT\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, pkt(proxytest.FromNode, "192.168.0.10", "172.30.0.1", 80), rejected, 1},
		{"REDIRECT from a pod goes to the node",
			"*nat\n-A PREROUTING -p tcp -d 10.2.0.1 -j REDIRECT --to-ports 40001\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, podToRemote, fwd("192.168.0.10:40001"), 1},
		{"REDIRECT from the node goes to loopback",
			"*nat\n-A OUTPUT -p tcp -d 10.2.0.1 -j REDIRECT --to-ports 40001\nCOMMIT\n",
			TracerConfig{NodeIPs: node}, pkt(proxytest.FromNode, "192.168.0.10", "10.2.0.1", 80), fwd("127.0.0.1:40001"), 1},
		{"mangle marks are seen by filter",
			"*mangle\n-A PREROUTING -j MARK --set-mark 0x8000\nCOMMIT\n*filter\n-A FORWARD -m mark --mark 0x8000 -j DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, dropped, 1},
		{"DROP policy of FORWARD",
			"*filter\n-P FORWARD DROP\nCOMMIT\n",
			TracerConfig{}, podToRemote, dropped, 1},
		{"LOG goes on",
			"*filter\n-A FORWARD -j LOG --log-prefix \"x: \"\n-A FORWARD -j REJECT\nCOMMIT\n",
			TracerConfig{}, podToRemote, rejected, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFakeFromDump(v1.IPv4Protocol, tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			tr := NewTracer(f, tc.cfg)
			all, err := tr.TraceAll(tc.p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := all.Result()
			if err != nil {
				t.Fatal(err)
			}
			if !resultEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v\n%s", got, tc.want, describe(all))
			}
			if tc.paths != 0 && len(all.Paths) != tc.paths {
				t.Errorf("%d paths, want %d\n%s", len(all.Paths), tc.paths, describe(all))
			}
		})
	}
}

func TestTraceLocalDelivery(t *testing.T) {
	f, err := NewFakeFromDump(v1.IPv4Protocol, "*nat\n-A PREROUTING -p tcp --dport 3000 -j DNAT --to-destination 192.168.0.10:8080\nCOMMIT\n")
	if err != nil {
		t.Fatal(err)
	}
	all, err := NewTracer(f, TracerConfig{NodeIPs: []netip.Addr{nodeIP}}).TraceAll(pkt(proxytest.FromExternal, "1.2.3.4", "192.168.0.10", 3000))
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Paths) != 1 || !all.Paths[0].Local || all.Paths[0].Backend != ap("192.168.0.10:8080") || all.Paths[0].Verdict != proxytest.Forwarded {
		t.Errorf("paths:\n%s", describe(all))
	}
}

func TestTraceLimits(t *testing.T) {
	var deep strings.Builder
	deep.WriteString("*filter\n")
	for i := 0; i < 120; i++ {
		fmt.Fprintf(&deep, ":C%d - [0:0]\n", i)
	}
	deep.WriteString("-A FORWARD -j C0\n")
	for i := 0; i < 119; i++ {
		fmt.Fprintf(&deep, "-A C%d -j C%d\n", i, i+1)
	}
	deep.WriteString("COMMIT\n")

	var wide strings.Builder
	wide.WriteString("*filter\n")
	for i := 0; i < 16; i++ {
		wide.WriteString("-A FORWARD -m statistic --mode random --probability 0.5 -j MARK --or-mark 0x1\n")
	}
	wide.WriteString("COMMIT\n")

	for name, rules := range map[string]string{"deep": deep.String(), "wide": wide.String()} {
		t.Run(name, func(t *testing.T) {
			f, err := NewFakeFromDump(v1.IPv4Protocol, rules)
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewTracer(f, TracerConfig{}).Trace(pkt(proxytest.FromPod, "10.1.0.1", "10.2.0.1", 80))
			if !errors.Is(err, ErrTraceTooLarge) {
				t.Errorf("err = %v, want ErrTraceTooLarge", err)
			}
		})
	}
}

func TestTraceWhileRestoring(t *testing.T) {
	f := loadFixture(t, "kubeproxy-v4.restore", v1.IPv4Protocol)
	tr := NewTracer(f, testNodes)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			_ = f.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-SVC-SVC1 - [0:0]\n-A KUBE-SVC-SVC1 -j KUBE-SEP-EP2\nCOMMIT\n")})
			_ = f.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n:KUBE-SVC-SVC1 - [0:0]\n-A KUBE-SVC-SVC1 -j KUBE-SEP-EP1\nCOMMIT\n")})
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 100; i++ {
			res, err := tr.Trace(pkt(proxytest.FromPod, "10.180.0.9", "172.30.0.41", 80))
			if err != nil || res.Verdict != proxytest.Forwarded || len(res.Backends) == 0 || len(res.Backends) > 2 {
				t.Errorf("trace during restores: %+v, %v", res, err)
				return
			}
		}
	}()
	wg.Wait()
}
