package main

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// traceNFTables reads the kube-proxy table with "nft list table" and
// traces p through it with nftablestest's tracer.
func traceNFTables(ctx context.Context, p proxytest.Packet, node *nodeView, run toolRunner) (*traceReport, error) {
	family := "ip"
	if p.Dst.Is6() {
		family = "ip6"
	}
	args := []string{"list", "table", family, nftTableName}
	out, err := run(ctx, "nft", args...)
	if err != nil {
		return nil, fmt.Errorf("cannot read the nftables table %s %s: %w", family, nftTableName, err)
	}
	rep, err := traceNFTablesListing(string(out), p, node)
	if err != nil {
		return nil, err
	}
	rep.Read = []string{"nft " + strings.Join(args, " ")}
	return rep, nil
}

// traceNFTablesListing loads "nft list table" text into the nftables fake
// and traces p with its tracer.
func traceNFTablesListing(listing string, p proxytest.Packet, node *nodeView) (*traceReport, error) {
	ipFamily := v1.IPv4Protocol
	if p.Dst.Is6() {
		ipFamily = v1.IPv6Protocol
	}
	fakes := nftablestest.NewFakes(ipFamily)
	tx := fakes.NFTables.NewTransaction()
	notes, err := parseNFTListing(listing, tx)
	if err != nil {
		return nil, fmt.Errorf("reading nft's listing: %w", err)
	}
	if err := fakes.NFTables.Run(context.Background(), tx); err != nil {
		return nil, fmt.Errorf("loading the nftables table into svcproxy's fake: %w", err)
	}
	cfg := nftablestest.TracerConfig{
		NodeIPs:           node.Addrs,
		ExternalInterface: node.defaultInterface(p.Dst.Is6()),
	}
	if p.Origin != proxytest.FromNode {
		if in := node.interfaceFor(p.Src); in != "" {
			cfg.PodInterface = in
			cfg.Interfaces = map[netip.Addr]string{p.Src: in}
		}
	}
	res, err := nftablestest.NewTracer(fakes, cfg).Trace(p)
	if err != nil {
		return nil, fmt.Errorf("the table has a rule on this packet's way that svcproxy's tracer does not model (a foreign rule?), so it cannot say what happens: %w", err)
	}
	rep := &traceReport{Dataplane: "nftables (table " + string(knftablesFamily(ipFamily)) + " " + nftTableName + ")", Packet: newPacketReport(p), Notes: notes}
	rep.fillResult(res)
	if res.Verdict == proxytest.Forwarded && len(res.Backends) > 0 {
		// The table's only random choice is "numgen random mod N", an
		// even split over the service's endpoints.
		for i := range rep.Reach {
			rep.Reach[i].Probability = formatProbability(1 / float64(len(rep.Reach)))
		}
		rep.Notes = append(rep.Notes, "probabilities assume the table's numgen random mod N maps split evenly over the endpoints, as kube-proxy's and svcproxy's tables do")
	}
	rep.Notes = append(rep.Notes, "the nftables tracer reports the outcome, not the path of rules")
	return rep, nil
}

func knftablesFamily(f v1.IPFamily) knftables.Family {
	if f == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// parseNFTListing turns nft's "list table" output (the block syntax)
// into the objects of a knftables transaction: the table, its chains
// with their rules, sets and maps with their elements. Counters and
// flowtables are left out with a note.
func parseNFTListing(text string, tx *knftables.Transaction) (notes []string, err error) {
	lines := strings.Split(text, "\n")
	i := 0
	next := func() (string, bool) {
		for i < len(lines) {
			l := strings.TrimSpace(lines[i])
			i++
			if l != "" {
				return l, true
			}
		}
		return "", false
	}
	// block collects an object's lines up to its closing brace; a line
	// with unbalanced braces ("elements = { a,") continues on the next.
	block := func() ([]string, error) {
		var out []string
		for {
			l, ok := next()
			if !ok {
				return nil, fmt.Errorf("unexpected end of listing")
			}
			if l == "}" {
				return out, nil
			}
			for strings.Count(l, "{") > strings.Count(l, "}") {
				more, ok := next()
				if !ok {
					return nil, fmt.Errorf("unexpected end of listing in %q", l)
				}
				l += " " + more
			}
			out = append(out, l)
		}
	}
	l, ok := next()
	if !ok {
		return nil, fmt.Errorf("empty listing")
	}
	f := strings.Fields(l)
	if len(f) != 4 || f[0] != "table" || f[3] != "{" {
		return nil, fmt.Errorf("want \"table FAMILY NAME {\", got %q", l)
	}
	table := &knftables.Table{}
	tx.Add(table)
	// The fake checks references as it adds: chains first, then sets and
	// maps, then the elements and rules that name them.
	var chains, setsMaps, contents []knftables.Object
	for {
		l, ok := next()
		if !ok {
			return nil, fmt.Errorf("unexpected end of listing")
		}
		if l == "}" {
			for _, objs := range [][]knftables.Object{chains, setsMaps, contents} {
				for _, o := range objs {
					tx.Add(o)
				}
			}
			return notes, nil
		}
		f := strings.Fields(l)
		switch {
		case f[0] == "comment":
			c := unquote(strings.TrimPrefix(l, "comment "))
			table.Comment = &c
		case (f[0] == "chain" || f[0] == "set" || f[0] == "map") && len(f) == 3 && f[2] == "{":
			body, err := block()
			if err != nil {
				return nil, err
			}
			name := unquote(f[1])
			var obj knftables.Object
			var more []knftables.Object
			if f[0] == "chain" {
				obj, more, err = parseNFTChain(name, body)
				chains = append(chains, obj)
			} else {
				obj, more, err = parseNFTSetOrMap(f[0], name, body)
				setsMaps = append(setsMaps, obj)
			}
			contents = append(contents, more...)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", f[0], name, err)
			}
		case len(f) >= 3 && f[len(f)-1] == "{":
			if _, err := block(); err != nil {
				return nil, err
			}
			notes = append(notes, fmt.Sprintf("the table's %s %s was not loaded (the tracer does not use it)", f[0], f[1]))
		default:
			return nil, fmt.Errorf("unexpected line %q", l)
		}
	}
}

// parseNFTChain parses a chain and its rules.
func parseNFTChain(name string, body []string) (knftables.Object, []knftables.Object, error) {
	chain := &knftables.Chain{Name: name}
	var rules []knftables.Object
	for _, l := range body {
		switch {
		case strings.HasPrefix(l, "type ") && strings.Contains(l, " hook "):
			// type nat hook prerouting priority dstnat; policy accept;
			for _, part := range strings.Split(l, ";") {
				f := strings.Fields(part)
				if len(f) == 0 {
					continue
				}
				switch f[0] {
				case "type":
					for j := 0; j+1 < len(f); j += 2 {
						v := f[j+1]
						switch f[j] {
						case "type":
							chain.Type = knftables.PtrTo(knftables.BaseChainType(v))
						case "hook":
							chain.Hook = knftables.PtrTo(knftables.BaseChainHook(v))
						case "priority":
							prio := strings.Join(f[j+1:], "")
							chain.Priority = knftables.PtrTo(knftables.BaseChainPriority(prio))
							j = len(f)
						case "device":
							d := unquote(v)
							chain.Device = &d
						}
					}
				case "policy":
					if len(f) > 1 {
						chain.Policy = knftables.PtrTo(knftables.BaseChainPolicy(f[1]))
					}
				}
			}
		case strings.HasPrefix(l, "comment "):
			c := unquote(strings.TrimPrefix(l, "comment "))
			chain.Comment = &c
		default:
			rule, comment := splitTrailingComment(l)
			// nft prints "{ a, b }"; the fake (as knftables writes)
			// wants the comma as a word of its own.
			rule = writtenForm(strings.ReplaceAll(rule, ", ", " , "))
			r := &knftables.Rule{Chain: name, Rule: rule}
			if comment != "" {
				r.Comment = &comment
			}
			rules = append(rules, r)
		}
	}
	return chain, rules, nil
}

// parseNFTSetOrMap parses a set or map and its elements.
func parseNFTSetOrMap(kind, name string, body []string) (knftables.Object, []knftables.Object, error) {
	var elems []knftables.Object
	var typ, typeOf, comment, policy *string
	var flags []knftables.SetFlag
	var timeout *time.Duration
	var size *uint64
	var elements string
	for _, l := range body {
		word, rest, _ := strings.Cut(l, " ")
		switch word {
		case "type":
			typ = &rest
		case "typeof":
			typeOf = &rest
		case "flags":
			for _, fl := range strings.Split(rest, ",") {
				flags = append(flags, knftables.SetFlag(strings.TrimSpace(fl)))
			}
		case "timeout":
			d, err := time.ParseDuration(rest)
			if err != nil {
				return nil, nil, fmt.Errorf("timeout %q: %w", rest, err)
			}
			timeout = &d
		case "size":
			n, err := strconv.ParseUint(rest, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("size %q: %w", rest, err)
			}
			size = &n
		case "policy":
			policy = &rest
		case "comment":
			c := unquote(rest)
			comment = &c
		case "elements":
			elements = strings.TrimSpace(strings.TrimPrefix(rest, "="))
			elements = strings.TrimSuffix(strings.TrimPrefix(elements, "{"), "}")
		case "auto-merge", "gc-interval", "counter":
			// Not part of what the tracer reads.
		default:
			return nil, nil, fmt.Errorf("unexpected line %q", l)
		}
	}
	t, to := "", ""
	if typ != nil {
		t = *typ
	}
	if typeOf != nil {
		to = *typeOf
	}
	var obj knftables.Object
	if kind == "set" {
		obj = (&knftables.Set{Name: name, Type: t, TypeOf: to, Flags: flags, Timeout: timeout, Size: size, Comment: comment, Policy: policyOf(policy)})
	} else {
		obj = (&knftables.Map{Name: name, Type: t, TypeOf: to, Flags: flags, Timeout: timeout, Size: size, Comment: comment, Policy: policyOf(policy)})
	}
	for _, e := range splitTopLevel(elements, ',') {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		el := &knftables.Element{}
		key, value, isMap := strings.Cut(e, " : ")
		if kind == "map" {
			if !isMap {
				return nil, nil, fmt.Errorf("map element without a value: %q", e)
			}
			el.Map = name
			el.Value = strings.Split(strings.TrimSpace(value), " . ")
		} else {
			el.Set = name
		}
		key, c := splitTrailingComment(key)
		if c != "" {
			el.Comment = &c
		}
		// Dynamic elements print their timeout and expiry.
		for _, w := range []string{" timeout ", " expires "} {
			if j := strings.Index(key, w); j >= 0 {
				key = key[:j]
			}
		}
		el.Key = strings.Split(strings.TrimSpace(key), " . ")
		elems = append(elems, el)
	}
	return obj, elems, nil
}

// writtenForm turns nft's printed spelling of a rule back into the one
// kube-proxy's and svcproxy's writers use, which the tracer reads: nft
// prints "mark and 0x4000 == 0" as "meta mark & 0x00004000 == 0x00000000"
// and "mark set mark or 0x4000" as "meta mark set meta mark | 0x00004000",
// and upstream v1.37's "dnat ip addr . port to numgen … map {…}" as "dnat
// ip to numgen … map {…}".
func writtenForm(rule string) string {
	f := strings.Fields(rule)
	out := make([]string, 0, len(f))
	for j := 0; j < len(f); j++ {
		w := f[j]
		switch {
		case w == "meta" && j+1 < len(f) && f[j+1] == "mark":
			continue
		case w == "dnat" && j+2 < len(f) && (f[j+1] == "ip" || f[j+1] == "ip6") && f[j+2] == "to" && strings.Contains(strings.Join(f[j+3:], " "), " . "):
			// "dnat ip addr . port to MAP" (an address and port per
			// element) prints as "dnat ip to MAP".
			out = append(out, "dnat", f[j+1], "addr", ".", "port")
			j++
			continue
		case w == "&":
			w = "and"
		case w == "|":
			w = "or"
		case w == "^":
			w = "xor"
		case strings.HasPrefix(w, "0x") && j > 0 && (f[j-1] == "==" || f[j-1] == "!="):
			if n, err := strconv.ParseUint(w, 0, 64); err == nil {
				w = strconv.FormatUint(n, 10)
			}
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

func policyOf(p *string) *knftables.SetPolicy {
	if p == nil {
		return nil
	}
	return knftables.PtrTo(knftables.SetPolicy(*p))
}

// splitTrailingComment splits `RULE comment "TEXT"` into RULE and TEXT.
func splitTrailingComment(s string) (string, string) {
	if !strings.HasSuffix(s, `"`) {
		return s, ""
	}
	j := strings.LastIndex(s, ` comment "`)
	if j < 0 {
		return s, ""
	}
	return strings.TrimSpace(s[:j]), unquote(s[j+len(" comment "):])
}

// splitTopLevel splits s at sep outside braces and quotes.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for j := 0; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '{':
			depth++
		case c == '}':
			depth--
		case c == sep && depth == 0:
			out = append(out, s[start:j])
			start = j + 1
		}
	}
	return append(out, s[start:])
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}
