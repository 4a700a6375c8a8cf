//go:build linux

package xtablestest

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// randomRule builds a rule from the options a service proxy or CNI agent
// uses, valid or not (wrong table, missing -p, bad values), so that the
// Fake and the real tool can be compared on what they accept and print.
func randomRule(rng *rand.Rand, family v1.IPFamily) (table, chain, spec string) {
	v6 := family == v1.IPv6Protocol
	addr := func(v4, v6addr string) string {
		if v6 {
			return v6addr
		}
		return v4
	}
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	maybe := func(p float64) bool { return rng.Float64() < p }
	neg := func() string {
		if maybe(0.2) {
			return "! "
		}
		return ""
	}
	var parts []string
	add := func(s string) { parts = append(parts, s) }
	table = pick("filter", "nat", "mangle")
	chains := map[string][]string{
		"filter": {"INPUT", "FORWARD", "OUTPUT", "KUBE-T"},
		"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING", "KUBE-T"},
		"mangle": {"PREROUTING", "FORWARD", "POSTROUTING", "KUBE-T"},
	}
	chain = pick(chains[table]...)
	proto := ""
	if maybe(0.3) {
		// Not "! -s 0.0.0.0/0": iptables-nft refuses it, iptables-legacy
		// accepts it (the Fake refuses; unit-tested).
		if maybe(0.2) {
			add("-s " + addr("0.0.0.0/0", "::/0"))
		} else {
			add(neg() + "-s " + pick(addr("10.0.0.1", "fd00::1"), addr("10.0.0.0/8", "fd00::/8"), addr("10.1.2.3/255.255.0.0", "fd00:1:2::3/48"), addr("192.168.1.0/24", "2001:db8::/32")))
		}
	}
	if maybe(0.4) {
		add(neg() + "-d " + pick(addr("172.30.0.1", "fd00:30::1"), addr("172.30.0.0/16", "fd00:30::/64"), addr("127.0.0.0/8", "::1")))
	}
	if maybe(0.15) {
		add(neg() + "-i " + pick("eth0", "veth+", "cbr0"))
	}
	if maybe(0.15) {
		add(neg() + "-o " + pick("eth0", "lo", "cni+"))
	}
	if maybe(0.6) {
		proto = pick("tcp", "udp", "sctp", addr("icmp", "ipv6-icmp"), "all", "6", "17", "TCP", addr("icmp", "icmpv6"))
		add("-p " + proto)
	}
	for n := rng.Intn(3); n > 0; n-- {
		switch rng.Intn(12) {
		case 0:
			m := pick("tcp", "udp", "")
			if m != "" {
				add("-m " + m)
			}
			add(neg() + pick("--dport", "--sport") + " " + pick("80", "1000:2000", ":1024", "0"))
		case 1:
			add("-m comment --comment " + pick(`"a b"`, "plain", `"it's"`, `"q \"x\""`, `""`, `"ns/svc:p80 -> 10.0.0.1:80"`))
		case 2:
			add("-m addrtype " + neg() + pick("--dst-type", "--src-type") + " " + pick("LOCAL", "UNICAST", "LOCAL,BROADCAST", "BOGUS"))
		case 3:
			add("-m statistic --mode random --probability " + pick("0.5", "0.33333333333", "1", "0", "1.5"))
		case 4:
			add("-m recent " + pick("--set", "--rcheck --seconds 10800 --reap", "--update --hitcount 2", "--remove", "") + " --name " + pick("A", "KUBE-SEP-X") + pick("", " --rsource", " --rdest", " --mask "+addr("255.255.0.0", "ffff:ffff::")))
		case 5:
			add("-m mark " + neg() + "--mark " + pick("0x4000/0x4000", "16384", "0x1", "zz"))
		case 6:
			add("-m conntrack " + neg() + "--ctstate " + pick("NEW", "ESTABLISHED,RELATED", "INVALID", "DNAT", "NEW,BOGUS"))
		case 7:
			add("-m multiport " + pick("--dports", "--sports", "--ports") + " " + pick("80,443", "1:100,200", "80"))
		case 8:
			add("-m " + pick("tcp", "udp") + " " + pick("--syn", "--tcp-flags SYN,ACK SYN", "--tcp-flags ALL NONE", "! --syn"))
			if v6 && maybe(0.3) {
				add("-m icmp6 --icmpv6-type " + pick("128", "echo-request", "1/4"))
			}
		case 9:
			add("-m limit --limit " + pick("5/sec", "10/minute") + pick("", " --limit-burst 10"))
		case 10:
			add("-m connmark " + neg() + "--mark " + pick("0x1/0x1", "0x2"))
		case 11:
			add("-m state --state " + pick("NEW", "RELATED,ESTABLISHED"))
		}
	}
	switch rng.Intn(12) {
	case 0:
		add("-j " + pick("ACCEPT", "DROP", "RETURN"))
	case 1:
		add("-j REJECT" + pick("", " --reject-with tcp-reset", " --reject-with "+addr("icmp-host-prohibited", "icmp6-adm-prohibited"), " --reject-with bogus"))
	// NAT targets only at hooks that allow them: iptables-legacy accepts
	// some misplaced ones depending on the table's other rules (the
	// refusals are covered by differentialCases).
	case 2:
		if chain == "PREROUTING" || chain == "OUTPUT" || chain == "KUBE-T" {
			add("-j DNAT --to-destination " + pick(addr("10.1.0.1", "fd00:1::1"), addr("10.1.0.1:8080", "[fd00:1::1]:8080"), addr("10.1.0.1-10.1.0.3", "fd00:1::1-fd00:1::3"), addr("fd00::1", "10.1.0.1")))
		}
	case 3:
		if chain == "POSTROUTING" || chain == "KUBE-T" {
			add("-j SNAT --to-source " + pick(addr("192.168.0.10", "fd00::10"), addr("192.168.0.10:1000-2000", "[fd00::10]:1000-2000")) + pick("", " --random-fully"))
		}
	case 4:
		if chain == "POSTROUTING" || chain == "KUBE-T" {
			add("-j MASQUERADE" + pick("", " --random-fully", " --to-ports 1000-2000"))
		}
	case 5:
		add("-j MARK " + pick("--set-xmark 0x4000/0x4000", "--or-mark 0x4000", "--xor-mark 0x4000", "--and-mark 0xffff", "--set-mark 0x1/0x3", "--or-mark 0x1/0x1"))
	case 6:
		add("-j CONNMARK " + pick("--set-mark 0x1", "--save-mark", "--restore-mark --mask 0xff", "--set-xmark 0x1/0x3"))
	case 7:
		add("-j LOG --log-prefix " + pick(`"kube: "`, "x") + pick("", " --log-level 4"))
	case 8:
		add(pick("-j", "-g") + " KUBE-U")
	case 9:
		if chain == "PREROUTING" || chain == "OUTPUT" || chain == "KUBE-T" {
			add("-j REDIRECT" + pick("", " --to-ports 8080"))
		}
	case 10:
		add("-j NOPE")
	case 11:
		// no target
	}
	rng.Shuffle(len(parts), func(i, j int) {
		// Keep -j/-g last (options after a target belong to it), shuffle the rest.
		if strings.HasPrefix(parts[i], "-j") || strings.HasPrefix(parts[i], "-g") || strings.HasPrefix(parts[j], "-j") || strings.HasPrefix(parts[j], "-g") {
			return
		}
		// Options of a match must follow their -m: only move whole header options.
		if !isHeaderOpt(parts[i]) || !isHeaderOpt(parts[j]) {
			return
		}
		parts[i], parts[j] = parts[j], parts[i]
	})
	return table, chain, strings.Join(parts, " ")
}

func isHeaderOpt(p string) bool {
	p = strings.TrimPrefix(p, "! ")
	for _, h := range []string{"-s ", "-d ", "-i ", "-o ", "-p "} {
		if strings.HasPrefix(p, h) {
			return true
		}
	}
	return false
}

// TestRandomRulesAgainstRealIptables: rules drawn from a grammar of the
// options the Fake knows (fixed seeds, so the test is deterministic) are
// restored one by one into the real tools and into the Fake; each must be
// accepted or refused alike, and the final saved state must match.
func TestRandomRulesAgainstRealIptables(t *testing.T) {
	for _, run := range []struct {
		backend string
		family  v1.IPFamily
		seeds   int64
	}{{"nft", v1.IPv4Protocol, 5}, {"legacy", v1.IPv4Protocol, 5}, {"nft", v1.IPv6Protocol, 3}, {"legacy", v1.IPv6Protocol, 3}} {
		backend, family := run.backend, run.family
		for seed := int64(1); seed <= run.seeds; seed++ {
			t.Run(fmt.Sprintf("%s/%s/seed=%d", backend, family, seed), func(t *testing.T) {
				prefix := "iptables-" + backend
				if family == v1.IPv6Protocol {
					prefix = "ip6tables-" + backend
				}
				skipUnlessRealIptables(t, prefix+"-restore", prefix+"-save")
				rng := rand.New(rand.NewSource(seed))
				setup := "*filter\n:KUBE-T - [0:0]\n:KUBE-U - [0:0]\nCOMMIT\n*nat\n:KUBE-T - [0:0]\n:KUBE-U - [0:0]\nCOMMIT\n*mangle\n:KUBE-T - [0:0]\n:KUBE-U - [0:0]\nCOMMIT\n"
				inputs := []string{setup}
				for i := 0; i < 200; i++ {
					table, chain, spec := randomRule(rng, family)
					inputs = append(inputs, fmt.Sprintf("*%s\n-A %s %s\nCOMMIT\n", table, chain, spec))
				}
				realOK, realSave := runReal(t, prefix, inputs)
				if len(realOK) != len(inputs) {
					t.Fatalf("real run reported %d results for %d inputs", len(realOK), len(inputs))
				}
				f := NewFake(family)
				mismatches := 0
				for i, in := range inputs {
					err := f.Restore(ctx, xtables.RestoreInput{Text: []byte(in)})
					if (err == nil) != realOK[i] && mismatches < 10 {
						mismatches++
						t.Errorf("real ok=%v, fake err=%v: %s", realOK[i], err, strings.ReplaceAll(in, "\n", " | "))
					}
				}
				for _, table := range []string{"filter", "nat", "mangle"} {
					var buf bytes.Buffer
					_ = f.SaveInto(ctx, tableName(table), &buf)
					if real := tableSection(realSave, table); real != buf.String() {
						fl, rl := strings.Split(buf.String(), "\n"), strings.Split(real, "\n")
						for i := 0; i < len(fl) || i < len(rl); i++ {
							var f, r string
							if i < len(fl) {
								f = fl[i]
							}
							if i < len(rl) {
								r = rl[i]
							}
							if f != r {
								t.Errorf("table %s differs at line %d:\nfake: %q\nreal: %q", table, i+1, f, r)
								break
							}
						}
					}
				}
			})
		}
	}
}

func tableName(s string) xtables.Table { return xtables.Table(s) }
