package userspacetest

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
)

// TracerConfig configures NewTracer.
type TracerConfig struct {
	// Proxier is the engine traced (required): its sockets are where
	// traced packets end.
	Proxier *userspace.Proxier
	// NodeIPs are the node's addresses (see Tracer.NodeIPs); nil means the
	// proxier's Common.NodeIPs.
	NodeIPs []netip.Addr
}

// NewTracer returns a tracer over the proxier in cfg and the iptables of
// f it writes its capture rules to.
func NewTracer(f *Fakes, cfg TracerConfig) *Tracer {
	nodeIPs := cfg.NodeIPs
	if nodeIPs == nil && cfg.Proxier != nil {
		nodeIPs = userspace.ConfigOf(cfg.Proxier).NodeIPs
	}
	return &Tracer{Proxier: cfg.Proxier, IPTables: f.IPTables, NodeIPs: nodeIPs}
}

// Tracer implements proxytest.Tracer over a userspace.Proxier. NewTracer
// builds one over the kit's fakes; a test against a real kernel sets the
// fields itself (IPTables: the real runner).
type Tracer struct {
	// Proxier is the engine traced (required).
	Proxier *userspace.Proxier
	// IPTables is the runner the proxier was given (CaptureIPTables only).
	IPTables xtables.Runner
	// NodeIPs are the node's addresses: the destinations "-m addrtype
	// --dst-type LOCAL" matches (node ports), and where proxy sockets on
	// an unspecified ListenAddress are reached. Loopback addresses always
	// count as local.
	NodeIPs []netip.Addr
}

var _ proxytest.Tracer = (*Tracer)(nil)

// rule is one parsed iptables-save rule.
type rule struct {
	chain     string
	src, dst  netip.Prefix
	proto     string
	dport     int
	localDst  bool
	target    string
	toPort    int
	toAddr    netip.Addr
	unhandled string // an option the tracer does not understand
	text      string
}

type tables struct {
	nat, filter map[string][]rule
	text        string
}

func (t *Tracer) isLocal(ip netip.Addr) bool {
	return ip.IsLoopback() || slices.Contains(t.NodeIPs, ip)
}

// Trace implements proxytest.Tracer.
func (t *Tracer) Trace(pkt proxytest.Packet) (proxytest.Result, error) {
	_, res, err := t.Route(pkt)
	return res, err
}

// Route is Trace that also returns the proxy socket the packet reaches
// (its bound address; valid when the verdict is Forwarded), so a test can
// send real traffic to it.
func (t *Tracer) Route(pkt proxytest.Packet) (socket netip.AddrPort, res proxytest.Result, err error) {
	notProxied := proxytest.Result{Verdict: proxytest.NotProxied}
	if pkt.Protocol != v1.ProtocolTCP && pkt.Protocol != v1.ProtocolUDP {
		return socket, notProxied, nil // SCTP is never served
	}
	dst := pkt.Dst.Unmap()
	if userspace.ConfigOf(t.Proxier).Capture != userspace.CaptureIPTables {
		return t.traceSockets(pkt, netip.AddrPortFrom(dst, uint16(pkt.Port)), false)
	}
	if t.IPTables == nil {
		return socket, res, fmt.Errorf("userspacetest: CaptureIPTables proxier traced without its IPTables runner")
	}
	tb, err := t.load()
	if err != nil {
		return socket, res, err
	}
	hook := xtables.ChainPrerouting
	if pkt.Origin == proxytest.FromNode {
		hook = xtables.ChainOutput
	}
	proto := proxy.LowerProtocol(pkt.Protocol)
	// nat: the hook's jumps into our chains, in order.
	for _, j := range tb.nat[string(hook)] {
		if !isOurChain(j.target) || (j.localDst && !t.isLocal(dst)) {
			continue
		}
		for _, r := range tb.nat[j.target] {
			if r.target == "" {
				continue // a canary: counts, matches nothing
			}
			if r.unhandled != "" {
				return socket, res, fmt.Errorf("userspacetest: cannot trace rule %q: %s", r.text, r.unhandled)
			}
			if !r.matches(pkt.Src, dst, proto, pkt.Port) {
				continue
			}
			switch r.target {
			case "REDIRECT", "DNAT":
			default:
				return socket, res, fmt.Errorf("userspacetest: unexpected target in %q", r.text)
			}
			// The filter chain sees the redirected packet.
			for _, f := range tb.filter[string(userspace.ChainFilter)] {
				if f.target != "" && f.localDst && f.proto == proto && f.dport == r.toPort {
					return socket, verdictOf(f), nil
				}
			}
			return t.traceSockets(pkt, netip.AddrPortFrom(netip.Addr{}, uint16(r.toPort)), true)
		}
	}
	// Not redirected: only the filter chain's address rules (source ranges) apply.
	for _, f := range tb.filter[string(userspace.ChainFilter)] {
		if f.target != "" && !f.localDst && f.matches(pkt.Src, dst, proto, pkt.Port) {
			return socket, verdictOf(f), nil
		}
	}
	return socket, notProxied, nil
}

func verdictOf(f rule) proxytest.Result {
	if f.target == "REJECT" {
		return proxytest.Result{Verdict: proxytest.Rejected}
	}
	return proxytest.Result{Verdict: proxytest.Dropped}
}

func isOurChain(c string) bool {
	switch xtables.Chain(c) {
	case userspace.ChainPortalsContainer, userspace.ChainPortalsHost, userspace.ChainNodePortContainer, userspace.ChainNodePortHost:
		return true
	}
	return false
}

// traceSockets finds the proxy socket at to (with byPort, any proxy-port
// socket with to's port) and reports its endpoints.
func (t *Tracer) traceSockets(pkt proxytest.Packet, to netip.AddrPort, byPort bool) (netip.AddrPort, proxytest.Result, error) {
	for _, l := range userspace.Listeners(t.Proxier) {
		if l.Protocol != pkt.Protocol || l.Addr.Port() != to.Port() {
			continue
		}
		if !byPort {
			a := l.Addr.Addr()
			if a != to.Addr() && !(a.IsUnspecified() && t.isLocal(to.Addr())) {
				continue
			}
		}
		if len(l.Endpoints) == 0 {
			if pkt.Protocol == v1.ProtocolTCP {
				return l.Addr, proxytest.Result{Verdict: proxytest.Rejected}, nil
			}
			return l.Addr, proxytest.Result{Verdict: proxytest.Dropped}, nil
		}
		return l.Addr, proxytest.Result{Verdict: proxytest.Forwarded, Backends: slices.Clone(l.Endpoints), Masquerade: true, Sticky: l.Affinity.ClientIP}, nil
	}
	if byPort {
		return netip.AddrPort{}, proxytest.Result{}, fmt.Errorf("userspacetest: %s redirected to proxy port %d, where no %s proxy socket listens", pkt, to.Port(), pkt.Protocol)
	}
	return netip.AddrPort{}, proxytest.Result{Verdict: proxytest.NotProxied}, nil
}

func (r rule) matches(src, dst netip.Addr, proto string, port int) bool {
	return (!r.src.IsValid() || r.src.Contains(src)) && (!r.dst.IsValid() || r.dst.Contains(dst)) &&
		(r.proto == "" || r.proto == proto) && (r.dport == 0 || r.dport == port)
}

// Dump renders the proxier's proxy sockets and, in CaptureIPTables mode,
// its rules, for test failure output.
func (t *Tracer) Dump() string {
	var b strings.Builder
	for _, l := range userspace.Listeners(t.Proxier) {
		fmt.Fprintf(&b, "socket %s/%s local=%v -> %v sticky=%v\n", l.Addr, l.Protocol, l.Local, l.Endpoints, l.Affinity.ClientIP)
	}
	if userspace.ConfigOf(t.Proxier).Capture == userspace.CaptureIPTables && t.IPTables != nil {
		if tb, err := t.load(); err != nil {
			fmt.Fprintf(&b, "rules: %v\n", err)
		} else {
			b.WriteString(tb.text)
		}
	}
	return b.String()
}

func (t *Tracer) load() (*tables, error) {
	tb := &tables{nat: map[string][]rule{}, filter: map[string][]rule{}}
	var all strings.Builder
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		var buf bytes.Buffer
		if err := t.IPTables.SaveInto(context.Background(), table, &buf); err != nil {
			return nil, fmt.Errorf("userspacetest: reading %s table: %w", table, err)
		}
		all.Write(buf.Bytes())
		m := tb.nat
		if table == xtables.TableFilter {
			m = tb.filter
		}
		sc := lines.New(buf.Bytes())
		for sc.Scan() {
			if !bytes.HasPrefix(sc.Line(), []byte("-A ")) {
				continue
			}
			r, err := parseRule(string(sc.Line()))
			if err != nil {
				return nil, err
			}
			m[r.chain] = append(m[r.chain], r)
		}
	}
	tb.text = all.String()
	return tb, nil
}

// parseRule parses one "-A CHAIN ..." line of iptables-save output.
func parseRule(line string) (rule, error) {
	toks, err := tokenize(line)
	if err != nil {
		return rule{}, fmt.Errorf("userspacetest: %q: %w", line, err)
	}
	r := rule{text: line}
	bad := func(format string, a ...any) (rule, error) {
		return rule{}, fmt.Errorf("userspacetest: %q: "+format, append([]any{line}, a...)...)
	}
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		arg := func() string {
			if i+1 < len(toks) {
				i++
				return toks[i]
			}
			return ""
		}
		switch tok {
		case "-A":
			r.chain = arg()
		case "-s", "-d":
			v := arg()
			p, err := netip.ParsePrefix(v)
			if err != nil {
				a, err2 := netip.ParseAddr(v)
				if err2 != nil {
					return bad("bad address %q", v)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			if tok == "-s" {
				r.src = p
			} else {
				r.dst = p
			}
		case "-p":
			r.proto = arg()
		case "-m":
			arg() // match names; their options are handled below
		case "--comment", "--ctstate", "--state", "--reject-with":
			arg()
		case "--dst-type":
			r.localDst = arg() == "LOCAL"
		case "--dport":
			v := arg()
			n, err := strconv.Atoi(v)
			if err != nil {
				return bad("bad port %q", v)
			}
			r.dport = n
		case "-j":
			r.target = arg()
		case "--to-ports":
			v := arg()
			n, err := strconv.Atoi(v)
			if err != nil {
				return bad("bad --to-ports %q", v)
			}
			r.toPort = n
		case "--to-destination":
			v := arg()
			ap, err := netip.ParseAddrPort(v)
			if err != nil {
				return bad("bad --to-destination %q", v)
			}
			r.toAddr, r.toPort = ap.Addr(), int(ap.Port())
		default:
			r.unhandled = tok
			if strings.HasPrefix(tok, "--") {
				arg()
			}
		}
	}
	return r, nil
}

// tokenize splits a rule line, honouring double-quoted arguments.
func tokenize(line string) ([]string, error) {
	var out []string
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := i + 1
			for j < len(line) && line[j] != '"' {
				if line[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(line) {
				return nil, fmt.Errorf("unterminated quote")
			}
			s, err := strconv.Unquote(line[i : j+1])
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			i = j + 1
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' {
				j++
			}
			out = append(out, line[i:j])
			i = j
		}
	}
	return out, nil
}
