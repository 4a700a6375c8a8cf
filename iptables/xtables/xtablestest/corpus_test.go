package xtablestest

import (
	"os"

	v1 "k8s.io/api/core/v1"
)

// differentialCases are restore inputs that the root-only
// TestDifferentialAgainstRealIptables feeds to the real iptables-restore
// and the Fake, and that seed FuzzRestore.
var differentialCases = []struct {
	name   string
	family v1.IPFamily
	// legacyOnly: iptables-nft-restore 1.8.9 crashes on the input.
	legacyOnly bool
	inputs     []string
}{
	{"kube-proxy sync then partial sync", v1.IPv4Protocol, false, []string{
		mustRead("testdata/kubeproxy-v4.restore"),
		`*nat
:KUBE-SVC-SVC1 - [0:0]
:KUBE-SEP-EP1 - [0:0]
:KUBE-SEP-EP2 - [0:0]
:KUBE-SEP-NEW - [0:0]
-A KUBE-SVC-SVC1 -m comment --comment "ns1/svc1:p80 -> 10.180.0.2:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-EP2
-A KUBE-SVC-SVC1 -m comment --comment "ns1/svc1:p80 -> 10.180.0.10:80" -j KUBE-SEP-NEW
-A KUBE-SEP-EP2 -m comment --comment ns1/svc1:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-EP2 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
-A KUBE-SEP-NEW -m comment --comment ns1/svc1:p80 -s 10.180.0.10 -j KUBE-MARK-MASQ
-A KUBE-SEP-NEW -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.10:80
-X KUBE-SEP-EP1
COMMIT
`,
	}},
	{"errors leave the table unchanged", v1.IPv4Protocol, false, []string{
		"*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-B -j RETURN\nCOMMIT\n",
		"*nat\n-A KUBE-A -j KUBE-NOPE\nCOMMIT\n",
		"*nat\n-A KUBE-NOPE -j ACCEPT\nCOMMIT\n",
		"*nat\n-X KUBE-B\nCOMMIT\n",
		"*nat\n-X KUBE-A\nCOMMIT\n",
		"*nat\n-X KUBE-NOPE\nCOMMIT\n",
		"*nat\n-D KUBE-A -j ACCEPT\nCOMMIT\n",
		"*nat\n-A KUBE-B -j KUBE-A\nCOMMIT\n",
		"*nat\n-A KUBE-A -j KUBE-A\nCOMMIT\n",
		"*nat\n-A KUBE-A -p tcp --dprot 80 -j ACCEPT\nCOMMIT\n",
		"*nat\n-A KUBE-A -m tcp --dport 80 -j ACCEPT\nCOMMIT\n",
		"*nat\n-N KUBE-A\nCOMMIT\n",
		"*nat\n-I KUBE-A 5 -j ACCEPT\nCOMMIT\n",
		"*nat\n-A KUBE-A -j DNAT --to-destination 1.2.3.4:80\nCOMMIT\n",
		"*filter\n-A INPUT -p tcp -j DNAT --to-destination 1.2.3.4:80\nCOMMIT\n",
		"*filter\n-A INPUT -j FORWARD\nCOMMIT\n",
		"*nat\n:KUBE-C - [0:0]\n-A KUBE-C -j RETURN\n-A KUBE-NOPE -j RETURN\nCOMMIT\n",
		"*nat\n:KUBE-B - [0:0]\n-X KUBE-B\nCOMMIT\n",
		"*nat\n-A OUTPUT -j REJECT\nCOMMIT\n",
		"*nat\n-A PREROUTING -j DROP\nCOMMIT\n",
		"*mangle\n-A PREROUTING -j REJECT\nCOMMIT\n",
		"*filter\n:X - [0:0]\n-A X -j REJECT\n-A INPUT -j X\nCOMMIT\n",
		"*nat\n-A INPUT -j MASQUERADE\nCOMMIT\n",
		"*nat\n-A OUTPUT -p tcp -j SNAT --to-source 1.2.3.4\nCOMMIT\n",
		"*nat\n-A POSTROUTING -p tcp -j DNAT --to-destination 1.2.3.4\nCOMMIT\n",
		"*nat\n-A PREROUTING -j KUBE-A\nCOMMIT\n",
		"*nat\n-A OUTPUT -j KUBE-A\nCOMMIT\n",
		"*nat\n:KUBE-D - [0:0]\n-A KUBE-D -m comment --comment \"it's \\\"quoted\\\"\" -j KUBE-D\n-A POSTROUTING -j KUBE-D\nCOMMIT\n",
		"*nat\n:KUBE-D - [0:0]\n-A KUBE-D -m comment --comment \"\" -m comment --comment \"it's \\\"quoted\\\"\" -j RETURN\nCOMMIT\n",
	}},
	{"equivalent spellings", v1.IPv4Protocol, false, []string{
		`*filter
:KUBE-X - [0:0]
-A KUBE-X -p 6 -d 10.0.0.1 --destination-port 80 -j ACCEPT
-A KUBE-X -s 10.0.0.0/255.255.0.0 ! -i eth+ -o cbr0 -p udp -m udp --sport 53 --dport 1000:2000 -j DROP
-A KUBE-X -m mark --mark 16384/16384 -j MARK --set-mark 0x1/0x3
-A KUBE-X -j MARK --and-mark 0xffff
-A KUBE-X -m statistic --mode nth --every 3 --packet 1 -j RETURN
-A KUBE-X -m recent --name foo --rdest --update --hitcount 3 --seconds 5 -j RETURN
-A KUBE-X -p tcp -m multiport --dports 80,443,8000:8080 -j ACCEPT
-A KUBE-X -m addrtype ! --src-type LOCAL --dst-type LOCAL,BROADCAST --limit-iface-in -j RETURN
-A KUBE-X -p tcp --syn -j REJECT --reject-with tcp-reset
-A KUBE-X -m conntrack --ctstate NEW --ctorigdst 10.0.0.0/8 -j ACCEPT
-A KUBE-X -p icmp -m icmp --icmp-type 8 -j ACCEPT
-A KUBE-X -p tcp -m tcp --dport 80 -m comment --comment x --sport 5 -j ACCEPT
-A KUBE-X -m mark --mark 1 -j MARK --set-mark 2 -m comment --comment z
-A KUBE-X -p tcp --tcp-flags ALL NONE -j DROP
-A KUBE-X -p tcp ! --syn -j DROP
-A KUBE-X -m conntrack --ctstate ESTABLISHED,RELATED,NEW,INVALID -j ACCEPT
-A KUBE-X -m conntrack --ctstate DNAT,SNAT -j ACCEPT
-A KUBE-X -m state --state ESTABLISHED,RELATED -j ACCEPT
-A KUBE-X -j CONNMARK --set-mark 0x1
-A KUBE-X -j CONNMARK --save-mark
-A KUBE-X -j CONNMARK --restore-mark --mask 0xff
-A KUBE-X -j CONNMARK --save-mark --nfmask 0xf --ctmask 0xf0
-A KUBE-X -p icmp -m icmp --icmp-type echo-request -j ACCEPT
-A KUBE-X -p icmp -m icmp ! --icmp-type port-unreachable -j ACCEPT
-A KUBE-X -m limit --limit 5/sec -j LOG --log-prefix "x y "
-D KUBE-X -p tcp -d 10.0.0.1/32 -m tcp --dport 80 -j ACCEPT
COMMIT
`,
	}},
	{"policies, insert, replace, flush", v1.IPv4Protocol, true, []string{
		`*filter
:FORWARD DROP [0:0]
:KUBE-Y - [0:0]
-A KUBE-Y -j RETURN
-I KUBE-Y -m comment --comment "a b" -j ACCEPT
-I KUBE-Y 2 -m comment --comment 'single' -j DROP
-R KUBE-Y 1 -m comment --comment replaced -j ACCEPT
-A FORWARD -j KUBE-Y
COMMIT
`,
		"*filter\n:FORWARD - [0:0]\n-F FORWARD\n-P INPUT DROP\nCOMMIT\n",
	}},
	{"IPv6", v1.IPv6Protocol, false, []string{
		`*nat
:KUBE-SERVICES - [0:0]
:KUBE-SEP-A - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -d fd00:30::1 -p udp --dport 53 -j KUBE-SEP-A
-A KUBE-SEP-A -s fd00:180::5/128 -m recent --set --name KUBE-SEP-A -j MARK --or-mark 0x4000
-A KUBE-SEP-A -p udp -j DNAT --to-destination [fd00:180::5]:53
COMMIT
*filter
-A INPUT -p ipv6-icmp -j ACCEPT
-A INPUT -p tcp -j REJECT
COMMIT
`,
		"*nat\n-A KUBE-SERVICES -d 10.0.0.1 -j RETURN\nCOMMIT\n",
	}},
}

func mustRead(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}
