package iptablestest

import (
	"fmt"
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
			m.opts = reorder(m.opts, "--sport", "--dport")
		case "addrtype":
			m.opts = reorder(m.opts, "--src-type", "--dst-type", "--limit-iface-in", "--limit-iface-out")
		case "mark", "connmark":
			o, _ := m.get("--mark")
			v, mask, _ := parseMark(o.vals[0])
			m.opts = []opt{{name: "--mark", neg: o.neg, vals: []string{hexMark(v, mask)}}}
		case "statistic":
			mode, _ := m.get("--mode")
			if mode.vals[0] == "random" {
				p, _ := m.get("--probability")
				f, _ := strconv.ParseFloat(p.vals[0], 64)
				m.opts = []opt{mode, {name: "--probability", neg: p.neg, vals: []string{fmt.Sprintf("%.11f", f)}}}
			} else {
				every, _ := m.get("--every")
				packet, ok := m.get("--packet")
				if !ok {
					packet = opt{name: "--packet", vals: []string{"0"}}
				}
				m.opts = []opt{mode, every, packet}
			}
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
