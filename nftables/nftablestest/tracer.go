//go:build linux

package nftablestest

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TracerConfig describes the node around the table.
type TracerConfig struct {
	// NodeIPs are the node's local addresses ("fib … type local", and
	// where packets are delivered locally rather than forwarded).
	// Loopback addresses are always local.
	NodeIPs []netip.Addr
	// Interfaces, when it has the packet's source address, names the
	// interface a FromPod or FromExternal packet arrives on ("iifname");
	// else FromPod packets arrive on PodInterface (default "cbr0") and
	// FromExternal ones on ExternalInterface (default "eth0").
	Interfaces        map[netip.Addr]string
	PodInterface      string
	ExternalInterface string
}

// Tracer answers where a packet goes under the table a Fake holds, by
// evaluating the rules hook by hook: the output hook (packets from the
// node) or prerouting, then input (local destinations) or forward, then
// postrouting. It understands the rule forms the nftables engine and
// upstream kube-proxy write (matches on addresses, sets, verdict maps,
// numgen, fib type, marks, iifname; jump, goto, return, accept, drop,
// reject, dnat, dnat through an inline or a named map, masquerade,
// update). Every numgen branch is followed, so
// Backends holds every endpoint the packet may reach; affinity sets are
// taken as empty (a first packet), and Sticky reports that the path
// records the client in one.
type Tracer struct {
	fake *Fake
	cfg  TracerConfig
}

// NewTracer returns a tracer over f's table of the proxier's family.
func NewTracer(f *Fakes, cfg TracerConfig) *Tracer {
	if cfg.PodInterface == "" {
		cfg.PodInterface = "cbr0"
	}
	if cfg.ExternalInterface == "" {
		cfg.ExternalInterface = "eth0"
	}
	return &Tracer{fake: f.NFTables, cfg: cfg}
}

// Dump renders the traced table (the conformance runner logs it on
// failures).
func (t *Tracer) Dump() string { return t.fake.Dump() }

var _ proxytest.Tracer = (*Tracer)(nil)

// pkt is a packet's state along one path.
type pkt struct {
	src, dst netip.Addr
	port     int
	proto    string
	iif      string
	mark     uint64
	dnat     bool
	masq     bool
	sticky   bool
}

type verdict int

const (
	vContinue verdict = iota // fell off the end of the chain, or "return"
	vAccept
	vDrop
	vReject
)

type outcome struct {
	p pkt
	v verdict
}

// Trace implements proxytest.Tracer.
func (t *Tracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	t.fake.RLock()
	defer t.fake.RUnlock()
	tab := t.fake.Table
	start := pkt{src: p.Src.Unmap(), dst: p.Dst.Unmap(), port: p.Port, proto: proxy.LowerProtocol(p.Protocol)}
	if start.proto == "" {
		start.proto = proxy.LowerProtocol(v1.ProtocolTCP)
	}
	switch p.Origin {
	case proxytest.FromPod:
		start.iif = t.cfg.PodInterface
	case proxytest.FromExternal:
		start.iif = t.cfg.ExternalInterface
	}
	if i, ok := t.cfg.Interfaces[start.src]; ok && p.Origin != proxytest.FromNode {
		start.iif = i
	}
	if tab == nil {
		return proxytest.Result{Verdict: proxytest.NotProxied}, nil
	}
	ev := &evaluator{t: t, tab: tab}
	var outs []outcome
	var err error
	if p.Origin == proxytest.FromNode {
		outs, err = ev.hooks([]string{"output", "postrouting"}, []outcome{{p: start}})
		if err == nil {
			// A packet to a local address comes back in over loopback:
			// the input hook sees it (where node ports on loopback are
			// rejected).
			outs, err = ev.localInput(outs)
		}
	} else {
		outs, err = ev.hooks([]string{"prerouting"}, []outcome{{p: start}})
		if err == nil {
			var next []outcome
			for _, o := range outs {
				if o.v != vAccept {
					next = append(next, o)
					continue
				}
				hooks := []string{"forward", "postrouting"}
				if t.local(o.p.dst) {
					hooks = []string{"input"}
				}
				r, err2 := ev.hooks(hooks, []outcome{{p: o.p}})
				if err2 != nil {
					return proxytest.Result{}, err2
				}
				next = append(next, r...)
			}
			outs = next
		}
	}
	if err != nil {
		return proxytest.Result{}, err
	}
	return combine(outs)
}

// localInput runs the input hook for the accepted outcomes of a node's
// packet that stayed on the node (not DNATed elsewhere).
func (ev *evaluator) localInput(outs []outcome) ([]outcome, error) {
	var next []outcome
	for _, o := range outs {
		if o.v != vAccept || o.p.dnat || !ev.t.local(o.p.dst) {
			next = append(next, o)
			continue
		}
		r, err := ev.hooks([]string{"input"}, []outcome{{p: o.p}})
		if err != nil {
			return nil, err
		}
		next = append(next, r...)
	}
	return next, nil
}

func combine(outs []outcome) (proxytest.Result, error) {
	var res proxytest.Result
	for i, o := range outs {
		var r proxytest.Result
		switch {
		case o.v == vDrop:
			r.Verdict = proxytest.Dropped
		case o.v == vReject:
			r.Verdict = proxytest.Rejected
		case o.p.dnat:
			r = proxytest.Result{Verdict: proxytest.Forwarded, Backends: []netip.AddrPort{netip.AddrPortFrom(o.p.dst, uint16(o.p.port))},
				Masquerade: o.p.masq, Sticky: o.p.sticky}
		default:
			r.Verdict = proxytest.NotProxied
		}
		if i == 0 {
			res = r
			continue
		}
		if r.Verdict != res.Verdict || r.Masquerade != res.Masquerade || r.Sticky != res.Sticky {
			return proxytest.Result{}, fmt.Errorf("paths disagree: %s and %s", res, r)
		}
		res.Backends = append(res.Backends, r.Backends...)
	}
	return res.Normalize(), nil
}

func (t *Tracer) local(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	for _, n := range t.cfg.NodeIPs {
		if n.Unmap() == a {
			return true
		}
	}
	return false
}

type evaluator struct {
	t     *Tracer
	tab   *knftables.FakeTable
	depth int
}

// hooks runs the base chains of each hook in priority order.
func (ev *evaluator) hooks(hooks []string, in []outcome) ([]outcome, error) {
	cur := in
	for _, h := range hooks {
		for _, c := range ev.baseChains(h) {
			var next []outcome
			for _, o := range cur {
				if o.v != vAccept && o.v != vContinue {
					next = append(next, o)
					continue
				}
				r, err := ev.run(c, 0, o.p)
				if err != nil {
					return nil, err
				}
				for _, x := range r {
					if x.v == vContinue {
						x.v = vAccept // base chain policy accept
					}
					next = append(next, x)
				}
			}
			cur = next
		}
		for i := range cur {
			if cur[i].v == vContinue {
				cur[i].v = vAccept
			}
		}
	}
	return cur, nil
}

func (ev *evaluator) baseChains(hook string) []*knftables.FakeChain {
	var out []*knftables.FakeChain
	prio := map[*knftables.FakeChain]int{}
	for _, c := range ev.tab.Chains {
		if c.Hook == nil || string(*c.Hook) != hook {
			continue
		}
		n := 0
		if c.Priority != nil {
			n, _ = knftables.ParsePriority(ev.tab.Family, string(*c.Priority))
		}
		prio[c] = n
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if prio[out[i]] != prio[out[j]] {
			return prio[out[i]] < prio[out[j]]
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// run evaluates chain c from rule i on. vContinue means the chain ended
// (or returned).
func (ev *evaluator) run(c *knftables.FakeChain, i int, p pkt) ([]outcome, error) {
	ev.depth++
	defer func() { ev.depth-- }()
	if ev.depth > 200 {
		return nil, fmt.Errorf("chain %s: rules loop", c.Name)
	}
	for ; i < len(c.Rules); i++ {
		branches, err := ev.rule(c.Rules[i].Rule, p)
		if err != nil {
			return nil, fmt.Errorf("chain %s rule %q: %w", c.Name, c.Rules[i].Rule, err)
		}
		if len(branches) == 1 && branches[0].action == "" {
			p = branches[0].p // matched statements only, or no match
			continue
		}
		var outs []outcome
		for _, b := range branches {
			r, err := ev.follow(c, i, b)
			if err != nil {
				return nil, err
			}
			outs = append(outs, r...)
		}
		return outs, nil
	}
	return []outcome{{p: p, v: vContinue}}, nil
}

// follow carries out one branch's action at rule i of chain c.
func (ev *evaluator) follow(c *knftables.FakeChain, i int, b branch) ([]outcome, error) {
	switch b.action {
	case "":
		return ev.run(c, i+1, b.p)
	case "accept":
		return []outcome{{p: b.p, v: vAccept}}, nil
	case "drop":
		return []outcome{{p: b.p, v: vDrop}}, nil
	case "reject":
		return []outcome{{p: b.p, v: vReject}}, nil
	case "return":
		return []outcome{{p: b.p, v: vContinue}}, nil
	case "jump", "goto":
		sub, ok := ev.tab.Chains[b.target]
		if !ok {
			return nil, fmt.Errorf("no chain %q", b.target)
		}
		r, err := ev.run(sub, 0, b.p)
		if err != nil {
			return nil, err
		}
		if b.action == "goto" {
			return r, nil
		}
		var outs []outcome
		for _, o := range r {
			if o.v != vContinue {
				outs = append(outs, o)
				continue
			}
			rest, err := ev.run(c, i+1, o.p)
			if err != nil {
				return nil, err
			}
			outs = append(outs, rest...)
		}
		return outs, nil
	}
	return nil, fmt.Errorf("unknown action %q", b.action)
}

// branch is one way a rule goes: the packet after its statements, and the
// verdict action ("" none: on to the next rule).
type branch struct {
	p      pkt
	action string
	target string
}

// tokens splits a rule into words, with braces and commas on their own.
func tokens(rule string) []string {
	var out []string
	for _, f := range strings.Fields(rule) {
		for f != "" {
			switch {
			case strings.HasPrefix(f, "{") || strings.HasPrefix(f, "}") || strings.HasPrefix(f, ","):
				out = append(out, f[:1])
				f = f[1:]
			case strings.HasSuffix(f, ","):
				out = append(out, f[:len(f)-1], ",")
				f = ""
			default:
				out = append(out, f)
				f = ""
			}
		}
	}
	return out
}

// rule evaluates one rule's matches and statements against p.
func (ev *evaluator) rule(text string, p pkt) ([]branch, error) {
	return ev.ruleTokens(tokens(text), p)
}

// ruleTokens evaluates a rule's (remaining) tokens against p.
func (ev *evaluator) ruleTokens(tk []string, p pkt) ([]branch, error) {
	nomatch := []branch{{p: p}}
	for len(tk) > 0 {
		switch tk[0] {
		case "counter":
			tk = tk[1:]
			if len(tk) >= 2 && tk[0] == "name" {
				tk = tk[2:] // counter name "x": a named counter
			}
			continue
		case "jump", "goto":
			if len(tk) < 2 {
				return nil, fmt.Errorf("%s without a chain", tk[0])
			}
			return []branch{{p: p, action: tk[0], target: tk[1]}}, nil
		case "accept", "drop", "reject", "return":
			return []branch{{p: p, action: tk[0]}}, nil
		case "masquerade":
			p.masq = true
			return []branch{{p: p, action: "accept"}}, nil
		case "dnat":
			if len(tk) > 8 && (tk[1] == "ip" || tk[1] == "ip6") && strings.Join(tk[2:6], " ") == "addr . port to" {
				// dnat ip addr . port to numgen random mod N map { i : a . p , … }
				// (upstream v1.37's dispatch): one branch per endpoint.
				_, rest, numgen, err := ev.expr(tk[6:], p)
				if err != nil || numgen == 0 || len(rest) < 2 || rest[0] != "map" {
					return nil, fmt.Errorf("bad dnat map")
				}
				m, _, err := inlineMap(rest[1:])
				if err != nil {
					return nil, err
				}
				var out []branch
				for n := 0; n < numgen; n++ {
					f := strings.Fields(m[strconv.Itoa(n)])
					if len(f) != 3 || f[1] != "." {
						return nil, fmt.Errorf("dnat map element %d: %q", n, m[strconv.Itoa(n)])
					}
					b, err := dnatBranch(p, f[0], f[2])
					if err != nil {
						return nil, err
					}
					out = append(out, b)
				}
				return out, nil
			}
			if len(tk) == 11 && (tk[1] == "ip" || tk[1] == "ip6") && tk[2] == "to" &&
				strings.Join(tk[3:6], " ") == "numgen random mod" && tk[7] == "offset" && tk[9] == "map" {
				// dnat ip to numgen random mod N offset K map @m (the
				// engine's endpoint maps): one branch per key K … K+N-1.
				n, err1 := strconv.Atoi(tk[6])
				k, err2 := strconv.ParseUint(tk[8], 10, 32)
				name, ok := strings.CutPrefix(tk[10], "@")
				if err1 != nil || err2 != nil || !ok || n <= 0 {
					return nil, fmt.Errorf("bad dnat map %q", strings.Join(tk, " "))
				}
				var out []branch
				for i := range n {
					key := strconv.FormatUint(k+uint64(i), 10)
					v, found := ev.mapLookup(name, []string{key})
					f := strings.Fields(v)
					if !found || len(f) != 2 {
						return nil, fmt.Errorf("dnat map %s: key %s: %q (found %v)", name, key, v, found)
					}
					b, err := dnatBranch(p, f[0], f[1])
					if err != nil {
						return nil, err
					}
					out = append(out, b)
				}
				return out, nil
			}
			if len(tk) < 3 || tk[1] != "to" {
				return nil, fmt.Errorf("bad dnat")
			}
			ap, err := netip.ParseAddrPort(tk[2])
			if err != nil {
				return nil, fmt.Errorf("dnat target %q: %w", tk[2], err)
			}
			p.dst, p.port, p.dnat = ap.Addr().Unmap(), int(ap.Port()), true
			return []branch{{p: p, action: "accept"}}, nil
		case "update":
			// update @set { ip saddr }
			end := indexOf(tk, "}")
			if end < 0 {
				return nil, fmt.Errorf("bad update")
			}
			if strings.HasPrefix(strings.TrimPrefix(tk[1], "@"), "affinity-") {
				p.sticky = true
			}
			tk = tk[end+1:]
			continue
		}
		if len(tk) >= 5 && tk[0] == "mark" && tk[1] == "set" && tk[2] == "mark" {
			v, err := strconv.ParseUint(tk[4], 0, 64)
			if err != nil {
				return nil, err
			}
			switch tk[3] {
			case "or":
				p.mark |= v
			case "xor":
				p.mark ^= v
			default:
				return nil, fmt.Errorf("mark set %s", tk[3])
			}
			tk = tk[5:]
			continue
		}
		// A match: expression [. expression]* then an operator or vmap.
		vals, rest, numgen, err := ev.expr(tk, p)
		if err != nil {
			return nil, err
		}
		tk = rest
		if numgen > 0 {
			if len(tk) > 0 && tk[0] != "vmap" {
				// numgen random mod N [==] K goto X: the rule may go to X
				// or on to the next rule (this engine's dispatch).
				if tk[0] == "==" {
					tk = tk[1:]
				}
				// The rest of the rule runs on the matching branch: a
				// jump, goto or dnat (this engine's dispatch).
				k, err := strconv.Atoi(tk[0])
				if err != nil || k < 0 || k >= numgen {
					return nil, fmt.Errorf("numgen random mod %d compared with %q", numgen, tk[0])
				}
				if len(tk) < 2 {
					return nil, fmt.Errorf("numgen match without a statement")
				}
				out, err := ev.ruleTokens(tk[1:], p)
				if err != nil {
					return nil, err
				}
				if numgen == 1 {
					return out, nil
				}
				return append(out, branch{p: p}), nil
			}
			// numgen random mod N vmap { i : goto X, ... } (upstream's dispatch)
			if len(tk) == 0 {
				return nil, fmt.Errorf("numgen without vmap")
			}
			m, rest, err := inlineMap(tk[1:])
			if err != nil {
				return nil, err
			}
			if len(rest) != 0 {
				return nil, fmt.Errorf("tokens after numgen vmap: %v", rest)
			}
			var out []branch
			for n := 0; n < numgen; n++ {
				v, ok := m[strconv.Itoa(n)]
				if !ok {
					continue
				}
				f := strings.Fields(v)
				b := branch{p: p, action: f[0]}
				if len(f) > 1 {
					b.target = f[1]
				}
				out = append(out, b)
			}
			return out, nil
		}
		if len(tk) > 0 && tk[0] == "vmap" {
			if len(tk) < 2 || !strings.HasPrefix(tk[1], "@") {
				return nil, fmt.Errorf("vmap needs a named map")
			}
			v, ok := ev.mapLookup(tk[1][1:], vals)
			if !ok {
				return nomatch, nil
			}
			f := strings.Fields(v)
			b := branch{p: p, action: f[0]}
			if len(f) > 1 {
				b.target = f[1]
			}
			return []branch{b}, nil
		}
		neg := false
		if len(tk) > 0 && (tk[0] == "!=" || tk[0] == "==") {
			neg = tk[0] == "!="
			tk = tk[1:]
		}
		if len(tk) == 0 {
			return nil, fmt.Errorf("match without a value")
		}
		var ok bool
		switch {
		case strings.HasPrefix(tk[0], "@"):
			ok = ev.setHas(tk[0][1:], vals)
			tk = tk[1:]
		case tk[0] == "{":
			end := indexOf(tk, "}")
			if end < 0 {
				return nil, fmt.Errorf("unclosed {")
			}
			for _, x := range tk[1:end] {
				if x != "," && valueMatches(vals, x) {
					ok = true
				}
			}
			tk = tk[end+1:]
		default:
			ok = valueMatches(vals, tk[0])
			tk = tk[1:]
		}
		if ok == neg {
			return nomatch, nil
		}
	}
	return []branch{{p: p}}, nil
}

// dnatBranch is p DNATed to addr and port (a map element's value),
// accepted.
func dnatBranch(p pkt, addr, port string) (branch, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return branch{}, err
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return branch{}, err
	}
	p.dst, p.port, p.dnat = a.Unmap(), n, true
	return branch{p: p, action: "accept"}, nil
}

// expr reads one (possibly concatenated) expression's values for p.
func (ev *evaluator) expr(tk []string, p pkt) (vals []string, rest []string, numgen int, err error) {
	for {
		if len(tk) == 0 {
			return nil, nil, 0, fmt.Errorf("expression expected")
		}
		var v string
		switch {
		case (tk[0] == "ip" || tk[0] == "ip6") && len(tk) > 1 && (tk[1] == "saddr" || tk[1] == "daddr"):
			if tk[1] == "saddr" {
				v = p.src.String()
			} else {
				v = p.dst.String()
			}
			tk = tk[2:]
		case tk[0] == "meta" && len(tk) > 1 && tk[1] == "l4proto":
			v, tk = p.proto, tk[2:]
		case tk[0] == "th" && len(tk) > 1 && tk[1] == "dport":
			v, tk = strconv.Itoa(p.port), tk[2:]
		case (tk[0] == "tcp" || tk[0] == "udp" || tk[0] == "sctp") && len(tk) > 1 && tk[1] == "dport":
			if p.proto != tk[0] {
				v = "-" // never matches a port
			} else {
				v = strconv.Itoa(p.port)
			}
			tk = tk[2:]
		case tk[0] == "fib" && len(tk) > 2 && tk[2] == "type":
			a := p.src
			if tk[1] == "daddr" {
				a = p.dst
			}
			v = "unicast"
			if ev.t.local(a) {
				v = "local"
			}
			tk = tk[3:]
		case tk[0] == "iifname":
			v, tk = p.iif, tk[1:]
		case tk[0] == "ct" && len(tk) > 1 && tk[1] == "state":
			v, tk = "new", tk[2:]
		case tk[0] == "ct" && len(tk) > 1 && tk[1] == "status":
			v, tk = "-", tk[2:]
			if p.dnat {
				v = "dnat"
			}
		case tk[0] == "mark" && len(tk) > 2 && tk[1] == "and":
			m, err := strconv.ParseUint(tk[2], 0, 64)
			if err != nil {
				return nil, nil, 0, err
			}
			v, tk = strconv.FormatUint(p.mark&m, 10), tk[3:]
		case tk[0] == "numgen" && len(tk) > 3 && tk[1] == "random" && tk[2] == "mod":
			n, err := strconv.Atoi(tk[3])
			if err != nil {
				return nil, nil, 0, err
			}
			return nil, tk[4:], n, nil
		default:
			return nil, nil, 0, fmt.Errorf("unknown expression at %q", strings.Join(tk, " "))
		}
		vals = append(vals, v)
		if len(tk) > 0 && tk[0] == "." {
			tk = tk[1:]
			continue
		}
		return vals, tk, 0, nil
	}
}

// valueMatches compares a single-valued expression with a literal
// (address, prefix, number, name, quoted interface with "*").
func valueMatches(vals []string, lit string) bool {
	if len(vals) != 1 {
		return false
	}
	v := vals[0]
	lit = strings.Trim(lit, "\"")
	if pr, err := netip.ParsePrefix(lit); err == nil {
		a, err := netip.ParseAddr(v)
		return err == nil && pr.Contains(a)
	}
	if a, err := netip.ParseAddr(lit); err == nil {
		b, err := netip.ParseAddr(v)
		return err == nil && a == b
	}
	if strings.HasSuffix(lit, "*") {
		return strings.HasPrefix(v, strings.TrimSuffix(lit, "*"))
	}
	if n, err := strconv.ParseUint(lit, 0, 64); err == nil {
		m, err := strconv.ParseUint(v, 0, 64)
		return err == nil && n == m
	}
	return v == lit
}

func keyMatches(key []string, vals []string) bool {
	if len(key) != len(vals) {
		return false
	}
	for i := range key {
		if !valueMatches(vals[i:i+1], key[i]) {
			return false
		}
	}
	return true
}

func (ev *evaluator) setHas(name string, vals []string) bool {
	s, ok := ev.tab.Sets[name]
	if !ok {
		return false
	}
	for _, e := range s.Elements {
		if keyMatches(e.Key, vals) {
			return true
		}
	}
	return false
}

func (ev *evaluator) mapLookup(name string, vals []string) (string, bool) {
	m, ok := ev.tab.Maps[name]
	if !ok {
		return "", false
	}
	for _, e := range m.Elements {
		if keyMatches(e.Key, vals) {
			return strings.Join(e.Value, " "), true
		}
	}
	return "", false
}

// inlineMap parses "{ k : verdict [target] , ... }".
func inlineMap(tk []string) (map[string]string, []string, error) {
	if len(tk) == 0 || tk[0] != "{" {
		return nil, nil, fmt.Errorf("inline map expected")
	}
	end := indexOf(tk, "}")
	if end < 0 {
		return nil, nil, fmt.Errorf("unclosed inline map")
	}
	m := map[string]string{}
	var cur []string
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		if len(cur) < 3 || cur[1] != ":" {
			return fmt.Errorf("bad map element %v", cur)
		}
		m[cur[0]] = strings.Join(cur[2:], " ")
		cur = nil
		return nil
	}
	for _, x := range tk[1:end] {
		if x == "," {
			if err := flush(); err != nil {
				return nil, nil, err
			}
			continue
		}
		cur = append(cur, x)
	}
	if err := flush(); err != nil {
		return nil, nil, err
	}
	return m, tk[end+1:], nil
}

func indexOf(tk []string, s string) int {
	for i, x := range tk {
		if x == s {
			return i
		}
	}
	return -1
}
