//go:build linux

package xtblob_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/xtblob"
)

var (
	randomSeed  = flag.Uint64("xtblob.seed", 0, "seed of TestEncodeRandomMatchesKernel (0: the time)")
	randomRules = flag.Int("xtblob.rules", 400, "rules per family and table of TestEncodeRandomMatchesKernel")
)

// TestEncodeRandomMatchesKernel is TestEncodeMatchesKernel over random
// combinations of the vocabulary (every option, inversions, port ranges,
// option order), so that what the engines happen not to write is checked
// too. The seed is logged; -xtblob.seed replays a run.
func TestEncodeRandomMatchesKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	seed := *randomSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-xtblob.seed=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for _, fam := range []xtblob.Family{xtblob.IPv4, xtblob.IPv6} {
		g := ruleGen{rng: rng, fam: fam}
		var corpus []corpusRule
		for _, table := range []string{"filter", "nat"} {
			for i := 0; i < *randomRules; i++ {
				corpus = append(corpus, corpusRule{Family: fam, Table: table, Chain: "XT-RANDOM",
					Rule: g.rule(table, i), Source: fmt.Sprintf("random %d", i)})
			}
		}
		t.Run(famName(fam), func(t *testing.T) {
			netnstest.InFreshNetns(t, func() { checkFamilyInKernel(t, fam, corpus) })
		})
	}
}

// ruleGen writes random rules that iptables and the kernel accept.
type ruleGen struct {
	rng *rand.Rand
	fam xtblob.Family
}

func (g *ruleGen) chance(p float64) bool   { return g.rng.Float64() < p }
func (g *ruleGen) pick(s ...string) string { return s[g.rng.IntN(len(s))] }

func (g *ruleGen) not(p float64) string {
	if g.chance(p) {
		return "! "
	}
	return ""
}

func (g *ruleGen) addr() netip.Addr {
	if g.fam == xtblob.IPv6 {
		var b [16]byte
		for i := range b {
			b[i] = byte(g.rng.IntN(256))
		}
		a := netip.AddrFrom16(b)
		if a.Is4In6() {
			return g.addr()
		}
		return a
	}
	var b [4]byte
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return netip.AddrFrom4(b)
}

func (g *ruleGen) prefix() string {
	a := g.addr()
	switch g.rng.IntN(3) {
	case 0:
		return a.String()
	case 1:
		return fmt.Sprintf("%s/%d", a, a.BitLen())
	}
	return fmt.Sprintf("%s/%d", a, 1+g.rng.IntN(a.BitLen()))
}

func (g *ruleGen) port() int { return g.rng.IntN(65536) }

func (g *ruleGen) portSpec() string {
	switch g.rng.IntN(5) {
	case 0, 1:
		return fmt.Sprint(g.port())
	case 2:
		lo := g.port()
		return fmt.Sprintf("%d:%d", lo, lo+g.rng.IntN(65536-lo))
	case 3:
		return fmt.Sprintf("%d:", g.port())
	}
	return fmt.Sprintf(":%d", g.port())
}

func (g *ruleGen) iface() string {
	n := g.pick("eth0", "veth", "cbr0", "lo", "a-very-long-if", "x")
	if g.chance(0.3) {
		n += "+"
	}
	return n
}

func (g *ruleGen) list(names ...string) string {
	var out []string
	for _, n := range names {
		if g.chance(0.35) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = append(out, names[g.rng.IntN(len(names))])
	}
	g.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return strings.Join(out, ",")
}

func (g *ruleGen) mark() string {
	v := g.rng.Uint32()
	switch g.rng.IntN(3) {
	case 0:
		return fmt.Sprintf("%#x", v)
	case 1:
		return fmt.Sprint(v)
	}
	return fmt.Sprintf("%#x/%#x", v, g.rng.Uint32())
}

func (g *ruleGen) comment() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 /:.-_>+=,"
	n := g.rng.IntN(80)
	if g.chance(0.05) {
		n = 255
	}
	var b strings.Builder
	for range n {
		b.WriteByte(chars[g.rng.IntN(len(chars))])
	}
	return `"` + b.String() + `"`
}

// rule writes one rule for table; i makes recent list names unique.
func (g *ruleGen) rule(table string, i int) string {
	var groups []string
	proto := ""
	protoInverted := false
	if g.chance(0.7) {
		proto = g.pick("tcp", "udp", "sctp")
		protoInverted = g.chance(0.1)
		groups = append(groups, g.not(b2f(protoInverted))+"-p "+proto)
	}
	if g.chance(0.4) {
		groups = append(groups, g.not(0.3)+"-s "+g.prefix())
	}
	if g.chance(0.4) {
		groups = append(groups, g.not(0.3)+"-d "+g.prefix())
	}
	if g.chance(0.2) {
		groups = append(groups, g.not(0.3)+"-i "+g.iface())
	}
	if g.chance(0.2) {
		groups = append(groups, g.not(0.3)+"-o "+g.iface())
	}
	if proto != "" && !protoInverted && g.chance(0.7) {
		m := "-m " + proto
		if g.chance(0.8) {
			m += " " + g.not(0.2) + "--dport " + g.portSpec()
		}
		if g.chance(0.3) {
			m += " " + g.not(0.2) + "--sport " + g.portSpec()
		}
		groups = append(groups, m)
	}
	if g.chance(0.6) {
		groups = append(groups, "-m comment --comment "+g.comment())
	}
	if g.chance(0.3) {
		groups = append(groups, "-m conntrack "+g.not(0.3)+"--ctstate "+
			g.list("INVALID", "NEW", "ESTABLISHED", "RELATED", "UNTRACKED", "SNAT", "DNAT"))
	}
	if g.chance(0.2) {
		groups = append(groups, "-m mark "+g.not(0.3)+"--mark "+g.mark())
	}
	if g.chance(0.2) {
		types := []string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST", "BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}
		if g.fam == xtblob.IPv6 {
			types = []string{"UNSPEC", "UNICAST", "LOCAL", "ANYCAST", "MULTICAST", "UNREACHABLE"}
		}
		m := "-m addrtype"
		src, dst := g.chance(0.5), g.chance(0.5)
		if !src && !dst {
			dst = true
		}
		if src {
			m += " " + g.not(0.3) + "--src-type " + g.list(types...)
		}
		if dst {
			m += " " + g.not(0.3) + "--dst-type " + g.list(types...)
		}
		if g.chance(0.2) {
			m += " " + g.pick("--limit-iface-in", "--limit-iface-out")
		}
		groups = append(groups, m)
	}
	if g.chance(0.2) {
		p := g.rng.Float64()
		digits := g.rng.IntN(11) + 1
		groups = append(groups, fmt.Sprintf("-m statistic --mode random %s--probability %.*f", g.not(0.2), digits, p))
	}
	if g.chance(0.15) {
		m := "-m recent"
		if g.chance(0.5) {
			m += " " + g.not(0.2) + g.pick("--set", "--remove")
		} else {
			m += " " + g.not(0.2) + g.pick("--rcheck", "--update")
			if g.chance(0.6) {
				m += fmt.Sprintf(" --seconds %d", 1+g.rng.IntN(100000))
				if g.chance(0.5) {
					m += " --reap"
				}
			}
			if g.chance(0.3) {
				m += fmt.Sprintf(" --hitcount %d", 1+g.rng.IntN(20))
			}
			if g.chance(0.2) {
				m += " --rttl"
			}
		}
		if g.chance(0.8) {
			m += fmt.Sprintf(" --name R%d-%s", i, table)
		}
		if g.chance(0.3) {
			m += " " + g.pick("--rsource", "--rdest")
		}
		if g.chance(0.3) {
			m += " --mask " + g.addr().String()
		}
		groups = append(groups, m)
	}
	g.rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	if t := g.target(table, proto, protoInverted); t != "" {
		groups = append(groups, t)
	}
	return strings.Join(groups, " ")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (g *ruleGen) target(table, proto string, protoInverted bool) string {
	withPorts := proto != "" && !protoInverted
	switch g.rng.IntN(10) {
	case 0:
		return ""
	case 1:
		if table == "nat" {
			return "-j " + g.pick("ACCEPT", "RETURN")
		}
		return "-j " + g.pick("ACCEPT", "DROP", "RETURN")
	case 2:
		return g.pick("-j", "-g") + " " + g.pick("XT-T1", "XT-T2")
	case 3:
		switch g.rng.IntN(5) {
		case 0:
			return "-j MARK --set-xmark " + g.mark()
		case 1:
			return "-j MARK --set-mark " + g.mark()
		}
		return fmt.Sprintf("-j MARK %s %#x", g.pick("--or-mark", "--xor-mark", "--and-mark"), g.rng.Uint32())
	}
	if table == "filter" {
		if g.chance(0.3) {
			return "-j REJECT"
		}
		with := []string{"icmp-net-unreachable", "net-unreach", "icmp-host-unreachable", "host-unreach",
			"icmp-proto-unreachable", "proto-unreach", "icmp-port-unreachable", "port-unreach",
			"icmp-net-prohibited", "net-prohib", "icmp-host-prohibited", "host-prohib",
			"icmp-admin-prohibited", "admin-prohib"}
		if g.fam == xtblob.IPv6 {
			with = []string{"icmp6-no-route", "no-route", "icmp6-adm-prohibited", "adm-prohibited",
				"icmp6-addr-unreachable", "addr-unreach", "icmp6-port-unreachable", "port-unreach",
				"icmp6-policy-fail", "policy-fail", "icmp6-reject-route", "reject-route"}
		}
		if proto == "tcp" && !protoInverted {
			with = append(with, "tcp-reset")
			if g.fam == xtblob.IPv4 {
				with = append(with, "tcp-rst")
			}
		}
		return "-j REJECT --reject-with " + g.pick(with...)
	}
	flags := func(opts ...string) string {
		s := ""
		for _, o := range opts {
			if g.chance(0.25) {
				s += " " + o
			}
		}
		return s
	}
	switch g.rng.IntN(3) {
	case 0:
		a := g.addr()
		dst := a.String()
		if g.fam == xtblob.IPv6 && g.chance(0.5) {
			dst = "[" + dst + "]"
		}
		if withPorts && g.chance(0.7) {
			dst = netip.AddrPortFrom(a, uint16(g.port())).String()
		}
		return "-j DNAT --to-destination " + dst + flags("--random", "--persistent")
	case 1:
		return "-j MASQUERADE" + flags("--random", "--random-fully")
	}
	if !withPorts {
		return "-j REDIRECT" + flags("--random")
	}
	lo := g.port()
	ports := fmt.Sprint(lo)
	if g.chance(0.3) {
		ports = fmt.Sprintf("%d-%d", lo, lo+g.rng.IntN(65536-lo))
	}
	return "-j REDIRECT --to-ports " + ports + flags("--random")
}
