package xtablestest

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// canonicalize rewrites the options of the extensions kube-proxy-like
// rulesets use into the form iptables-save prints (same option order,
// defaults made explicit, marks in hex), so that Dump reads like the
// real tool's output and equivalent spellings are the same rule. It runs
// after compilation, so the values are known to parse.
func (r *rule) canonicalize(family v1.IPFamily) {
	for _, m := range r.matches {
		switch m.name {
		case "tcp", "udp", "sctp":
			for i, o := range m.opts {
				switch o.name {
				case "--syn":
					m.opts[i] = opt{name: "--tcp-flags", neg: o.neg, vals: []string{"FIN,SYN,RST,ACK", "SYN"}}
				case "--tcp-flags":
					mask, _ := parseTCPFlags(o.vals[0])
					comp, _ := parseTCPFlags(o.vals[1])
					m.opts[i].vals = []string{tcpFlagNames(mask), tcpFlagNames(comp)}
				}
			}
			for i, o := range m.opts {
				if o.name == "--sport" || o.name == "--dport" {
					pr, _ := parsePortRange(o.vals[0])
					m.opts[i].vals = []string{pr.String()}
				}
			}
			m.opts = reorder(m.opts, "--sport", "--dport")
		case "addrtype":
			m.opts = reorder(m.opts, "--src-type", "--dst-type", "--limit-iface-in", "--limit-iface-out")
		case "conntrack", "state":
			for i, o := range m.opts {
				if o.name == "--ctstate" || o.name == "--state" {
					m.opts[i].vals = []string{orderStates(o.vals[0])}
				}
			}
		case "icmp":
			if o, ok := m.get("--icmp-type"); ok {
				if n, known := icmpTypes[o.vals[0]]; known {
					m.opts = []opt{{name: "--icmp-type", neg: o.neg, vals: []string{n}}}
				}
			}
		case "mark", "connmark":
			o, _ := m.get("--mark")
			v, mask, _ := parseMark(o.vals[0])
			m.opts = []opt{{name: "--mark", neg: o.neg, vals: []string{hexMark(v, mask)}}}
		case "statistic":
			mode, _ := m.get("--mode")
			if mode.vals[0] == "random" {
				p, _ := m.get("--probability")
				f, _ := strconv.ParseFloat(p.vals[0], 64)
				// The kernel keeps the probability as a 31-bit fraction.
				q := float64(uint32(math.Round(f*0x80000000))) / 0x80000000
				m.opts = []opt{mode, {name: "--probability", neg: p.neg, vals: []string{fmt.Sprintf("%.11f", q)}}}
			} else {
				every, _ := m.get("--every")
				packet, ok := m.get("--packet")
				if !ok {
					packet = opt{name: "--packet", vals: []string{"0"}}
				}
				m.opts = []opt{mode, every, packet}
			}
		case "limit":
			rate := opt{name: "--limit", vals: []string{"3/hour"}}
			if o, ok := m.get("--limit"); ok {
				rate = opt{name: "--limit", neg: o.neg, vals: []string{canonicalRate(o.vals[0])}}
			}
			out := []opt{rate}
			if o, ok := m.get("--limit-burst"); ok && o.vals[0] != "5" {
				out = append(out, o)
			}
			m.opts = out
		case "recent":
			var out []opt
			for _, name := range []string{"--set", "--rcheck", "--update", "--remove", "--seconds", "--reap", "--hitcount", "--rttl"} {
				if o, ok := m.get(name); ok {
					out = append(out, o)
				}
			}
			name, ok := m.get("--name")
			if !ok {
				name = opt{name: "--name", vals: []string{"DEFAULT"}}
			}
			mask, ok := m.get("--mask")
			if !ok {
				def := "255.255.255.255"
				if family == v1.IPv6Protocol {
					def = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
				}
				mask = opt{name: "--mask", vals: []string{def}}
			}
			dir, ok := m.get("--rdest")
			if !ok {
				dir = opt{name: "--rsource"}
			}
			m.opts = append(out, name, mask, dir)
		}
	}
	if r.target == "REJECT" && len(r.targetOpts) == 0 {
		with := "icmp-port-unreachable"
		if family == v1.IPv6Protocol {
			with = "icmp6-port-unreachable"
		}
		r.targetOpts = []opt{{name: "--reject-with", vals: []string{with}}}
	}
	if r.target == "LOG" {
		var out []opt
		for _, o := range r.targetOpts {
			if o.name == "--log-level" {
				level := logLevels[strings.ToLower(o.vals[0])]
				if level == "4" {
					continue // the default
				}
				o.vals = []string{level}
			}
			out = append(out, o)
		}
		r.targetOpts = out
	}
	if r.target == "CONNMARK" {
		r.targetOpts = canonicalConnmark(r.targetOpts)
	}
	if r.target == "MARK" && len(r.targetOpts) == 1 {
		o := r.targetOpts[0]
		v, m, _ := parseMark(o.vals[0])
		switch o.name {
		case "--set-mark":
			m |= v
		case "--or-mark":
			m = v
		case "--and-mark":
			v, m = 0, ^v
		case "--xor-mark":
			m = 0
		}
		r.targetOpts = []opt{{name: "--set-xmark", vals: []string{fmt.Sprintf("0x%x/0x%x", v, m)}}}
	}
}

func hexMark(v, mask uint32) string {
	if mask == 0xffffffff {
		return fmt.Sprintf("0x%x", v)
	}
	return fmt.Sprintf("0x%x/0x%x", v, mask)
}

// reorder puts the named options first, in that order, keeping the rest after.
func reorder(opts []opt, names ...string) []opt {
	out := make([]opt, 0, len(opts))
	for _, n := range names {
		for _, o := range opts {
			if o.name == n {
				out = append(out, o)
			}
		}
	}
	for _, o := range opts {
		known := false
		for _, n := range names {
			known = known || o.name == n
		}
		if !known {
			out = append(out, o)
		}
	}
	return out
}

// tcpFlagNames prints TCP flags as iptables-save does.
func tcpFlagNames(f int) string {
	if f == 0 {
		return "NONE"
	}
	var names []string
	for i, n := range []string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"} {
		if f&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// stateOrder is the order iptables-save prints conntrack states in.
var stateOrder = []string{"INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED", "SNAT", "DNAT"}

func orderStates(v string) string {
	set := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		set[strings.ToUpper(s)] = true
	}
	var out []string
	for _, s := range stateOrder {
		if set[s] {
			out = append(out, s)
		}
	}
	return strings.Join(out, ",")
}

// icmpTypes maps the ICMP type names iptables accepts to the numbers
// iptables-save prints.
var icmpTypes = map[string]string{
	"echo-reply": "0", "pong": "0", "destination-unreachable": "3",
	"network-unreachable": "3/0", "host-unreachable": "3/1", "protocol-unreachable": "3/2",
	"port-unreachable": "3/3", "fragmentation-needed": "3/4", "source-route-failed": "3/5",
	"network-unknown": "3/6", "host-unknown": "3/7", "network-prohibited": "3/9",
	"host-prohibited": "3/10", "TOS-network-unreachable": "3/11", "TOS-host-unreachable": "3/12",
	"communication-prohibited": "3/13", "host-precedence-violation": "3/14", "precedence-cutoff": "3/15",
	"source-quench": "4", "redirect": "5", "network-redirect": "5/0", "host-redirect": "5/1",
	"TOS-network-redirect": "5/2", "TOS-host-redirect": "5/3", "echo-request": "8", "ping": "8",
	"router-advertisement": "9", "router-solicitation": "10", "time-exceeded": "11", "ttl-exceeded": "11",
	"ttl-zero-during-transit": "11/0", "ttl-zero-during-reassembly": "11/1", "parameter-problem": "12",
	"ip-header-bad": "12/0", "required-option-missing": "12/1", "timestamp-request": "13",
	"timestamp-reply": "14", "address-mask-request": "17", "address-mask-reply": "18",
}

// canonicalConnmark prints CONNMARK as iptables-save does: marks as
// --set-xmark value/mask, --save-mark and --restore-mark with both masks.
func canonicalConnmark(opts []opt) []opt {
	get := func(name string) (opt, bool) {
		for _, o := range opts {
			if o.name == name {
				return o, true
			}
		}
		return opt{}, false
	}
	for _, o := range opts {
		switch o.name {
		case "--set-xmark", "--set-mark", "--and-mark", "--or-mark", "--xor-mark":
			v, m, _ := parseMark(o.vals[0])
			switch o.name {
			case "--set-mark":
				m |= v
			case "--or-mark":
				m = v
			case "--and-mark":
				v, m = 0, ^v
			case "--xor-mark":
				m = 0
			}
			return []opt{{name: "--set-xmark", vals: []string{fmt.Sprintf("0x%x/0x%x", v, m)}}}
		case "--save-mark", "--restore-mark":
			nf, ct := "0xffffffff", "0xffffffff"
			if m, ok := get("--mask"); ok {
				nf, ct = m.vals[0], m.vals[0]
			}
			if m, ok := get("--nfmask"); ok {
				nf = m.vals[0]
			}
			if m, ok := get("--ctmask"); ok {
				ct = m.vals[0]
			}
			nv, _ := strconv.ParseUint(nf, 0, 32)
			cv, _ := strconv.ParseUint(ct, 0, 32)
			return []opt{{name: o.name}, {name: "--nfmask", vals: []string{fmt.Sprintf("0x%x", nv)}}, {name: "--ctmask", vals: []string{fmt.Sprintf("0x%x", cv)}}}
		}
	}
	return opts
}

var logLevels = map[string]string{
	"0": "0", "1": "1", "2": "2", "3": "3", "4": "4", "5": "5", "6": "6", "7": "7",
	"emerg": "0", "panic": "0", "alert": "1", "crit": "2", "err": "3", "error": "3",
	"warning": "4", "warn": "4", "notice": "5", "info": "6", "debug": "7",
}

// limitUnits are the rate units of the limit match, in the kernel's
// scale (XT_LIMIT_SCALE = 10000 per second), largest first.
var limitUnits = []struct {
	name string
	mult uint64
}{{"day", 10000 * 86400}, {"hour", 10000 * 3600}, {"min", 10000 * 60}, {"sec", 10000}}

// parseRate parses "N[/second|/minute|/hour|/day]" (any prefix of the
// unit) into the kernel's period, as iptables does.
func parseRate(s string) (uint64, bool) {
	num, unit, hasUnit := strings.Cut(s, "/")
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || n == 0 {
		return 0, false
	}
	mult := uint64(10000)
	if hasUnit {
		switch {
		case unit != "" && strings.HasPrefix("second", unit):
			mult = 10000
		case unit != "" && strings.HasPrefix("minute", unit):
			mult = 10000 * 60
		case unit != "" && strings.HasPrefix("hour", unit):
			mult = 10000 * 3600
		case unit != "" && strings.HasPrefix("day", unit):
			mult = 10000 * 86400
		default:
			return 0, false
		}
	}
	if n > mult {
		return 0, false
	}
	return mult / n, true
}

// canonicalRate prints a rate as iptables-save does (libxt_limit's
// print_rate): in the largest unit that represents it without loss.
func canonicalRate(s string) string {
	period, ok := parseRate(s)
	if !ok {
		return s
	}
	i := 1
	for ; i < len(limitUnits); i++ {
		u := limitUnits[i].mult
		if period > u || u/period < u%period {
			break
		}
	}
	return fmt.Sprintf("%d/%s", limitUnits[i-1].mult/period, limitUnits[i-1].name)
}

func (p portRange) String() string {
	if p.lo == p.hi {
		return strconv.Itoa(p.lo)
	}
	return strconv.Itoa(p.lo) + ":" + strconv.Itoa(p.hi)
}
