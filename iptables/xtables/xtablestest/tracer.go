package xtablestest

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TracerConfig describes the node a Tracer simulates. The zero value is a
// node with no addresses of its own beyond loopback, pods behind "cbr0"
// and an uplink "eth0".
type TracerConfig struct {
	// NodeIPs are the addresses local to the node (what "-m addrtype
	// --src-type/--dst-type LOCAL" matches, and where packets are
	// delivered locally rather than forwarded). Loopback addresses
	// (127.0.0.0/8, ::1) are always local.
	NodeIPs []netip.Addr
	// PodInterface is the interface traffic from local pods arrives on
	// (Origin FromPod), for example "cbr0" or "veth1234". Default "cbr0".
	PodInterface string
	// ExternalInterface is the node's uplink: traffic from outside
	// (Origin FromExternal) arrives on it, and packets to destinations
	// no Route covers leave through it. Default "eth0".
	ExternalInterface string
	// SourceInterfaces, when it has the packet's source address, names
	// the interface a FromPod or FromExternal packet arrives on instead
	// of PodInterface or ExternalInterface (for a node with one veth per
	// pod, or several uplinks).
	SourceInterfaces map[netip.Addr]string
	// Routes say which interface a forwarded packet leaves by, longest
	// prefix first (for example the local pod CIDR via PodInterface).
	// Local destinations leave by "lo"; the rest by ExternalInterface.
	Routes []Route
	// IPSetMatch answers "-m set --match-set" matches (the ipvs engine's
	// rules); nil makes a rule using one an error. It is called with the
	// Fake locked: it must not call the Fake.
	IPSetMatch func(q IPSetQuery) (bool, error)
	// SourcePort is the source port of traced packets whose
	// Packet.SrcPort is 0. When both are 0 the source port is unknown: a
	// rule that matches on it is then an error.
	SourcePort int
	// MasqueradeMark, when Mask is not zero, also counts a packet as
	// masqueraded when it leaves POSTROUTING with mark&Mask == Value
	// (kube-proxy's default is 0x4000/0x4000). By default only MASQUERADE
	// and SNAT rules the packet hits count.
	MasqueradeMark Mark
	// Sysctl, when set, is the node's /proc/sys: the Tracer reads
	// RouteLocalnet from it at each trace (the kernel's default is off;
	// the iptables engine turns it on for Config.LocalhostNodePorts).
	// Nil means route_localnet is on.
	Sysctl *Sysctl
}

// Mark is a packet mark value under a mask.
type Mark struct{ Value, Mask uint32 }

// TracerConfigFor describes the node of the conformance topology
// (proxytest.Topology, which internal/netnstest builds with real
// namespaces): its addresses (NodeIP and PodGateway), one host interface
// per pod (packets from a pod arrive on it, packets to it leave by it),
// the external clients' uplinks, and the default route out of
// WorldInterface.
func TracerConfigFor(topo proxytest.Topology) TracerConfig {
	cfg := TracerConfig{
		NodeIPs:           []netip.Addr{topo.NodeIP, topo.PodGateway},
		PodInterface:      topo.ClientPod.HostInterface,
		ExternalInterface: topo.WorldInterface,
		SourceInterfaces:  map[netip.Addr]string{},
	}
	for _, pod := range topo.Pods() {
		cfg.SourceInterfaces[pod.IP] = pod.HostInterface
		cfg.Routes = append(cfg.Routes, Route{Prefix: netip.PrefixFrom(pod.IP, pod.IP.BitLen()), Interface: pod.HostInterface})
	}
	for addr, iface := range map[netip.Addr]string{topo.ExternalClient: topo.UplinkInterface, topo.ExternalClient2: topo.Uplink2Interface} {
		if addr.IsValid() && iface != "" {
			cfg.SourceInterfaces[addr] = iface
			cfg.Routes = append(cfg.Routes, Route{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Interface: iface})
		}
	}
	slices.SortFunc(cfg.Routes, func(a, b Route) int { return a.Prefix.Addr().Compare(b.Prefix.Addr()) })
	return cfg
}

// Route sends packets for Prefix out of Interface.
type Route struct {
	Prefix    netip.Prefix
	Interface string
}

// IPSetQuery asks whether a packet matches an ipset in a
// "-m set --match-set Set flags" match.
type IPSetQuery struct {
	// Set is the set name.
	Set string
	// Flags are the direction flags as written ("src" or "dst", one per
	// dimension of the set).
	Flags []string
	// Addrs and Ports hold, for each flag, the packet's source or
	// destination address and port (a source port is that of
	// TracerConfig.SourcePort, possibly 0).
	Addrs []netip.Addr
	Ports []int
	// Protocol is the packet's protocol.
	Protocol v1.Protocol
}

// Tracer answers where a packet goes under the rules a Fake holds, walking
// the chains as the kernel does. It implements proxytest.Tracer. A Tracer
// reads the Fake's current state (and TracerConfig.Sysctl) at each call;
// it is safe for concurrent use (a trace holds the Fake's lock).
type Tracer struct {
	fake *Fake
	cfg  TracerConfig
}

var _ proxytest.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer over fake for a node described by cfg.
// iptablestest.NewTracer is the same over the iptables engine's kit
// (its Fakes bring the Sysctl).
func NewTracer(fake *Fake, cfg TracerConfig) *Tracer {
	return newTracer(fake, cfg)
}

func newTracer(fake *Fake, cfg TracerConfig) *Tracer {
	if cfg.PodInterface == "" {
		cfg.PodInterface = "cbr0"
	}
	if cfg.ExternalInterface == "" {
		cfg.ExternalInterface = "eth0"
	}
	cfg.NodeIPs = slices.Clone(cfg.NodeIPs)
	cfg.SourceInterfaces = maps.Clone(cfg.SourceInterfaces)
	cfg.Routes = slices.Clone(cfg.Routes)
	slices.SortStableFunc(cfg.Routes, func(a, b Route) int { return b.Prefix.Bits() - a.Prefix.Bits() })
	return &Tracer{fake: fake, cfg: cfg}
}

// Dump returns the rules the Tracer reads (Fake.Dump); the conformance
// runner logs it when a check fails.
func (tr *Tracer) Dump() string { return tr.fake.Dump() }

// Path is one way a packet can go through the rules. Random matches
// (statistic) and state the tracer cannot know (whether a recent list
// already holds the client) make several paths possible.
type Path struct {
	// Verdict is what happens on this path: Forwarded when the packet was
	// DNAT'd and let through, NotProxied when let through unchanged,
	// Dropped or Rejected when a rule or a policy stopped it.
	Verdict proxytest.Verdict
	// Backend is the DNAT destination (valid when the packet was DNAT'd,
	// also on paths that then drop it).
	Backend netip.AddrPort
	// Local reports the packet is delivered to the node itself (INPUT)
	// rather than forwarded.
	Local bool
	// Masquerade reports a MASQUERADE or SNAT rule (or the
	// TracerConfig.MasqueradeMark) applied.
	Masquerade bool
	// Sticky reports the path records the client for session affinity
	// ("-m recent --set") or depends on such a record ("--rcheck").
	Sticky bool
	// Rules lists the rules that matched, in order, as
	// "table CHAIN: rule", and the policies applied, for explaining a
	// trace.
	Rules []string
}

// Trace is every path a packet can take.
type Trace struct {
	Packet proxytest.Packet
	Paths  []Path
}

// AmbiguousError is returned by Trace when the paths of a packet end in
// different verdicts (for example one path DNATs to a backend and
// another drops the packet): the rules make the outcome random, which a
// service proxy's rules never should. Trace holds every path.
type AmbiguousError struct {
	Trace Trace
}

func (e *AmbiguousError) Error() string {
	var vs []string
	for _, p := range e.Trace.Paths {
		v := p.Verdict.String()
		if p.Backend.IsValid() {
			v += " " + p.Backend.String()
		}
		vs = append(vs, v)
	}
	return fmt.Sprintf("xtablestest: packet %s has paths with different verdicts: %s", packetString(e.Trace.Packet), strings.Join(vs, ", "))
}

func packetString(p proxytest.Packet) string {
	return fmt.Sprintf("%s %s -> %s:%d/%s", p.Origin, p.Src, p.Dst, p.Port, p.Protocol)
}

// Result combines the paths: when they agree on the verdict, that
// verdict; Backends are the sorted, distinct DNAT destinations of the
// Forwarded paths; Masquerade and Sticky are true when they are on any
// path. When the paths disagree it returns an *AmbiguousError.
func (t Trace) Result() (proxytest.Result, error) {
	var res proxytest.Result
	if len(t.Paths) == 0 {
		return res, fmt.Errorf("xtablestest: no path for packet %s", packetString(t.Packet))
	}
	res.Verdict = t.Paths[0].Verdict
	for _, p := range t.Paths {
		if p.Verdict != res.Verdict {
			return proxytest.Result{}, &AmbiguousError{Trace: t}
		}
		if p.Verdict == proxytest.Forwarded && !slices.Contains(res.Backends, p.Backend) {
			res.Backends = append(res.Backends, p.Backend)
		}
		res.Masquerade = res.Masquerade || p.Masquerade
		res.Sticky = res.Sticky || p.Sticky
	}
	slices.SortFunc(res.Backends, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return res, nil
}

// Trace implements proxytest.Tracer: TraceAll, then Trace.Result.
func (tr *Tracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	t, err := tr.TraceAll(p)
	if err != nil {
		return proxytest.Result{}, err
	}
	return t.Result()
}

// Limits that keep a trace bounded whatever the rules.
const (
	maxPaths = 10000
	maxDepth = 100
)

// ErrTraceTooLarge is returned when the rules give a packet more than
// 10000 possible paths or nest jumps more than 100 deep.
var ErrTraceTooLarge = errors.New("xtablestest: trace too large")

// TraceAll returns every path p can take. It fails on packets it cannot
// describe (invalid or wrong-family addresses, a port out of range),
// and on rules it cannot evaluate: matches and targets it does not know,
// or a known one used in a way it does not model. It never skips a rule
// it does not understand.
func (tr *Tracer) TraceAll(p proxytest.Packet) (Trace, error) {
	family := tr.fake.Family()
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return Trace{}, fmt.Errorf("xtablestest: packet needs source and destination addresses")
	}
	src, dst := p.Src.Unmap(), p.Dst.Unmap()
	if src.Is6() != (family == v1.IPv6Protocol) || dst.Is6() != (family == v1.IPv6Protocol) {
		return Trace{}, fmt.Errorf("xtablestest: packet %s is not %s, the fake's family", packetString(p), family)
	}
	if p.Port < 1 || p.Port > 65535 {
		return Trace{}, fmt.Errorf("xtablestest: packet port %d out of range", p.Port)
	}
	if p.SrcPort < 0 || p.SrcPort > 65535 {
		return Trace{}, fmt.Errorf("xtablestest: packet source port %d out of range", p.SrcPort)
	}
	proto := proxy.LowerProtocol(p.Protocol)
	if proto == "" {
		proto = "tcp"
	}
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return Trace{}, fmt.Errorf("xtablestest: packet protocol %q is not TCP, UDP or SCTP", p.Protocol)
	}
	st := &pktState{src: src, dst: dst, origSrc: src, origDst: dst, dport: p.Port, origDport: p.Port, proto: proto}

	tr.fake.mu.Lock()
	defer tr.fake.mu.Unlock()
	tc := &traceCtx{cfg: tr.cfg, fake: tr.fake, srcPort: p.SrcPort, routeLocalnet: tr.cfg.Sysctl == nil || routeLocalnet(tr.cfg.Sysctl)}
	var ends []*pktState
	var err error
	switch p.Origin {
	case proxytest.FromExternal, proxytest.FromPod:
		st.in = tr.cfg.ExternalInterface
		if p.Origin == proxytest.FromPod {
			st.in = tr.cfg.PodInterface
		}
		if in, ok := tr.cfg.SourceInterfaces[src]; ok {
			st.in = in
		}
		ends, err = tc.ingress(st)
	case proxytest.FromNode:
		ends, err = tc.fromNode(st)
	default:
		return Trace{}, fmt.Errorf("xtablestest: unknown packet origin %d", p.Origin)
	}
	if err != nil {
		return Trace{}, fmt.Errorf("xtablestest: tracing %s: %w", packetString(p), err)
	}
	t := Trace{Packet: p}
	for _, e := range ends {
		t.Paths = append(t.Paths, e.path())
	}
	return t, nil
}

// pathEnd is how a chain walk ends.
type pathEnd int

const (
	endContinue pathEnd = iota // target did not stop the walk
	endAccept                  // ACCEPT, or a NAT target
	endDrop
	endReject
	endReturn // fell off the end of the chain, or RETURN
)

type traceCtx struct {
	cfg           TracerConfig
	fake          *Fake
	srcPort       int  // Packet.SrcPort
	routeLocalnet bool // net.ipv4.conf.all.route_localnet
	hook          string
	paths         int
}

// martian says why routing refuses a packet with a loopback address that
// is not staying on the node: the kernel routes 127.0.0.0/8 sources and
// destinations off the loopback device only with route_localnet set, and
// never ::1. "" means the route is fine.
func (tc *traceCtx) martian(st *pktState, arriving bool) string {
	loopSrc, loopDst := st.src.IsLoopback(), st.dst.IsLoopback()
	switch {
	case !arriving && (!loopSrc || tc.isLocal(st.dst)):
		return ""
	case arriving && !loopSrc && !loopDst:
		return ""
	case st.src.Is6():
		return "routing: IPv6 loopback address off the loopback device"
	case !tc.routeLocalnet:
		return "routing: 127.0.0.0/8 address off the loopback device without route_localnet"
	}
	return ""
}

func (tc *traceCtx) sourcePort() (int, error) {
	switch {
	case tc.srcPort != 0:
		return tc.srcPort, nil
	case tc.cfg.SourcePort != 0:
		return tc.cfg.SourcePort, nil
	}
	return 0, fmt.Errorf("a rule matches the source port but neither Packet.SrcPort nor TracerConfig.SourcePort is set")
}

func (tc *traceCtx) hookIs(hooks ...string) bool {
	return slices.Contains(hooks, tc.hook)
}

func (tc *traceCtx) isLocal(a netip.Addr) bool {
	return a.IsLoopback() || slices.Contains(tc.cfg.NodeIPs, a)
}

func (tc *traceCtx) addrType(a netip.Addr) string {
	switch {
	case tc.isLocal(a):
		return "LOCAL"
	case a.IsMulticast():
		return "MULTICAST"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "BROADCAST"
	case a.IsUnspecified():
		return "UNSPEC"
	}
	return "UNICAST"
}

func (tc *traceCtx) route(dst netip.Addr) string {
	if tc.isLocal(dst) {
		return "lo"
	}
	for _, r := range tc.cfg.Routes {
		if r.Prefix.Contains(dst) {
			return r.Interface
		}
	}
	return tc.cfg.ExternalInterface
}

// pktState is the packet (and its connection) on one path.
type pktState struct {
	src, dst, origSrc, origDst netip.Addr
	dport, origDport           int
	proto                      string
	in, out                    string
	mark, ctmark               uint32
	dnat, snat, untracked      bool
	masqueraded                bool
	checkedRecent              bool
	local                      bool
	recent                     map[string]bool
	end                        pathEnd
	log                        *logEntry
}

type logEntry struct {
	prev *logEntry
	text string
}

func (st *pktState) clone() *pktState {
	n := *st
	if st.recent != nil {
		n.recent = make(map[string]bool, len(st.recent))
		for k, v := range st.recent {
			n.recent[k] = v
		}
	}
	return &n
}

func (st *pktState) logf(format string, args ...any) {
	st.log = &logEntry{prev: st.log, text: fmt.Sprintf(format, args...)}
}

func (st *pktState) recordRecent(key string) {
	if st.recent == nil {
		st.recent = map[string]bool{}
	}
	st.recent[key] = true
}

func (st *pktState) hasRecent(key string) bool { return st.recent[key] }

func (st *pktState) path() Path {
	p := Path{Local: st.local, Masquerade: st.masqueraded, Sticky: st.checkedRecent || len(st.recent) > 0}
	switch {
	case st.end == endDrop:
		p.Verdict = proxytest.Dropped
	case st.end == endReject:
		p.Verdict = proxytest.Rejected
	case st.dnat:
		p.Verdict = proxytest.Forwarded
	default:
		p.Verdict = proxytest.NotProxied
	}
	if st.dnat {
		p.Backend = netip.AddrPortFrom(st.dst, uint16(st.dport))
	}
	for e := st.log; e != nil; e = e.prev {
		p.Rules = append(p.Rules, e.text)
	}
	slices.Reverse(p.Rules)
	return p
}

// hookStep is one table's chain at one hook.
type hookStep struct {
	table xtables.Table
	hook  xtables.Chain
}

var (
	prerouting  = []hookStep{{"raw", xtables.ChainPrerouting}, {xtables.TableMangle, xtables.ChainPrerouting}, {xtables.TableNAT, xtables.ChainPrerouting}}
	input       = []hookStep{{xtables.TableMangle, xtables.ChainInput}, {xtables.TableFilter, xtables.ChainInput}, {"security", xtables.ChainInput}, {xtables.TableNAT, xtables.ChainInput}}
	forward     = []hookStep{{xtables.TableMangle, xtables.ChainForward}, {xtables.TableFilter, xtables.ChainForward}, {"security", xtables.ChainForward}}
	output      = []hookStep{{"raw", xtables.ChainOutput}, {xtables.TableMangle, xtables.ChainOutput}, {xtables.TableNAT, xtables.ChainOutput}}
	outputLate  = []hookStep{{xtables.TableFilter, xtables.ChainOutput}, {"security", xtables.ChainOutput}}
	postrouting = []hookStep{{xtables.TableMangle, xtables.ChainPostrouting}, {xtables.TableNAT, xtables.ChainPostrouting}}
	// A locally generated packet to a local address comes back in on lo;
	// its connection is already NATed, so the nat table is not consulted.
	loopbackIn = []hookStep{{"raw", xtables.ChainPrerouting}, {xtables.TableMangle, xtables.ChainPrerouting},
		{xtables.TableMangle, xtables.ChainInput}, {xtables.TableFilter, xtables.ChainInput}, {"security", xtables.ChainInput}}
)

// ingress follows a packet arriving on an interface: PREROUTING, the
// routing decision, then INPUT (local) or FORWARD and POSTROUTING.
func (tc *traceCtx) ingress(st *pktState) ([]*pktState, error) {
	states, done, err := tc.runHooks([]*pktState{st}, prerouting)
	if err != nil {
		return nil, err
	}
	var out []*pktState
	for _, s := range states {
		var rest []*pktState
		if why := tc.martian(s, true); why != "" {
			s.end = endDrop
			s.logf("%s", why)
			out = append(out, s)
			continue
		}
		if tc.isLocal(s.dst) {
			s.local = true
			rest, err = tc.finish(s, input, false)
		} else {
			s.out = tc.route(s.dst)
			rest, err = tc.finish(s, append(slices.Clone(forward), postrouting...), true)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	return append(done, out...), nil
}

// fromNode follows a locally generated packet: OUTPUT (raw, mangle, nat),
// rerouting after DNAT, OUTPUT (filter), POSTROUTING, and for a local
// destination the way back in through lo.
func (tc *traceCtx) fromNode(st *pktState) ([]*pktState, error) {
	st.out = tc.route(st.dst)
	states, done, err := tc.runHooks([]*pktState{st}, output)
	if err != nil {
		return nil, err
	}
	var out []*pktState
	for _, s := range states {
		if why := tc.martian(s, false); why != "" {
			s.end = endDrop
			s.logf("%s", why)
			out = append(out, s)
			continue
		}
		s.out = tc.route(s.dst)
		rest, err := tc.finish(s, append(slices.Clone(outputLate), postrouting...), true)
		if err != nil {
			return nil, err
		}
		for _, r := range rest {
			if r.end != endAccept || !tc.isLocal(r.dst) {
				out = append(out, r)
				continue
			}
			r.local, r.in, r.out = true, "lo", ""
			back, done, err := tc.runHooks([]*pktState{r}, loopbackIn)
			if err != nil {
				return nil, err
			}
			out = append(append(out, back...), done...)
		}
	}
	return append(done, out...), nil
}

// finish runs the remaining hooks and applies the masquerade mark rule.
func (tc *traceCtx) finish(s *pktState, steps []hookStep, leaves bool) ([]*pktState, error) {
	states, done, err := tc.runHooks([]*pktState{s}, steps)
	if err != nil {
		return nil, err
	}
	m := tc.cfg.MasqueradeMark
	for _, s := range states {
		if leaves && m.Mask != 0 && s.mark&m.Mask == m.Value {
			s.masqueraded = true
		}
	}
	return append(done, states...), nil
}

// runHooks runs each step on every live state. It returns the states
// still accepted after the last step, and those a step dropped or
// rejected.
func (tc *traceCtx) runHooks(states []*pktState, steps []hookStep) (live, done []*pktState, err error) {
	for _, step := range steps {
		var next []*pktState
		for _, s := range states {
			if step.table == xtables.TableNAT && s.untracked {
				next = append(next, s)
				continue
			}
			ends, err := tc.runBuiltin(step, s)
			if err != nil {
				return nil, nil, err
			}
			for _, e := range ends {
				if e.end == endAccept {
					next = append(next, e)
				} else {
					done = append(done, e)
				}
			}
		}
		states = next
	}
	for _, s := range states {
		s.end = endAccept
	}
	return states, done, nil
}

func (tc *traceCtx) runBuiltin(step hookStep, st *pktState) ([]*pktState, error) {
	t := tc.fake.tables[step.table]
	if t == nil {
		st.end = endAccept
		return []*pktState{st}, nil
	}
	c := t.chains[step.hook]
	tc.hook = string(step.hook)
	ends, err := tc.runChain(t, c, 0, st, 0)
	if err != nil {
		return nil, err
	}
	for _, e := range ends {
		if e.end == endReturn || e.end == endContinue {
			if c.policy == "DROP" {
				e.end = endDrop
			} else {
				e.end = endAccept
			}
			e.logf("%s %s: policy %s", t.name, c.name, c.policy)
		}
	}
	return ends, nil
}

// runChain walks chain c from rule index from. Every returned state has
// end set: endReturn when the walk fell off the end or hit RETURN.
func (tc *traceCtx) runChain(t *tableState, c *chainState, from int, st *pktState, depth int) ([]*pktState, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: jumps nest deeper than %d at %s %s", ErrTraceTooLarge, maxDepth, t.name, c.name)
	}
	for i := from; i < len(c.rules); i++ {
		r := c.rules[i]
		hit, miss, err := tc.matchRule(r, st)
		if err != nil {
			return nil, fmt.Errorf("%s %s rule %d (%s): %w", t.name, c.name, i+1, r.text(), err)
		}
		if len(hit) == 0 && len(miss) == 1 {
			st = miss[0]
			continue
		}
		var out []*pktState
		for _, m := range miss {
			rest, err := tc.runChain(t, c, i+1, m, depth)
			if err != nil {
				return nil, err
			}
			out = append(out, rest...)
		}
		for _, h := range hit {
			h.logf("%s %s: %s", t.name, c.name, r.text())
			ends, err := tc.applyTarget(t, r, h, depth)
			if err != nil {
				return nil, fmt.Errorf("%s %s rule %d (%s): %w", t.name, c.name, i+1, r.text(), err)
			}
			for _, e := range ends {
				if e.end == endContinue {
					rest, err := tc.runChain(t, c, i+1, e, depth)
					if err != nil {
						return nil, err
					}
					out = append(out, rest...)
				} else {
					out = append(out, e)
				}
			}
		}
		if tc.paths += len(out); tc.paths > maxPaths {
			return nil, fmt.Errorf("%w: more than %d paths", ErrTraceTooLarge, maxPaths)
		}
		return out, nil
	}
	st.end = endReturn
	return []*pktState{st}, nil
}

// applyTarget applies r's target to st. Returned states have end set;
// endContinue means the walk goes on with the next rule.
func (tc *traceCtx) applyTarget(t *tableState, r *rule, st *pktState, depth int) ([]*pktState, error) {
	switch r.target {
	case "":
		st.end = endContinue
		return []*pktState{st}, nil
	case "ACCEPT":
		st.end = endAccept
		return []*pktState{st}, nil
	case "DROP":
		st.end = endDrop
		return []*pktState{st}, nil
	case "RETURN":
		st.end = endReturn
		return []*pktState{st}, nil
	}
	if to := r.jumpsTo(); to != "" {
		c := t.chains[to]
		if c == nil {
			return nil, fmt.Errorf("chain %q vanished", to)
		}
		ends, err := tc.runChain(t, c, 0, st, depth+1)
		if err != nil {
			return nil, err
		}
		for _, e := range ends {
			if e.end == endReturn && !r.goTo {
				e.end = endContinue
			}
		}
		return ends, nil
	}
	if r.t == nil {
		return nil, fmt.Errorf("target %q: %w", r.target, ErrUnsupported)
	}
	end, err := r.t.apply(tc, st)
	if err != nil {
		return nil, err
	}
	st.end = end
	return []*pktState{st}, nil
}

// matchRule evaluates r's matches on st and returns the states in which
// the rule matches and those in which it does not (several when a match
// may go either way).
func (tc *traceCtx) matchRule(r *rule, st *pktState) (hit, miss []*pktState, err error) {
	if !headerMatches(r, st) {
		return nil, []*pktState{st}, nil
	}
	var walk func(i int, s *pktState) error
	walk = func(i int, s *pktState) error {
		for ; i < len(r.matches); i++ {
			m := r.matches[i]
			if m.m == nil {
				return fmt.Errorf("match %q: %w", m.name, ErrUnsupported)
			}
			res, err := m.m.eval(tc, s)
			if err != nil {
				return err
			}
			switch res {
			case triNo:
				miss = append(miss, s)
				return nil
			case triMaybe:
				miss = append(miss, s.clone())
				s = s.clone()
			}
		}
		hit = append(hit, s)
		return nil
	}
	if err := walk(0, st); err != nil {
		return nil, nil, err
	}
	return hit, miss, nil
}

func headerMatches(r *rule, st *pktState) bool {
	if r.src.set && r.src.p.Contains(st.src) == r.src.neg {
		return false
	}
	if r.dst.set && r.dst.p.Contains(st.dst) == r.dst.neg {
		return false
	}
	if !r.in.matches(st.in) || !r.out.matches(st.out) {
		return false
	}
	if r.proto != "" && (r.proto == st.proto) == r.protoNeg {
		return false
	}
	if r.fragment != nil && *r.fragment {
		return false // the traced packet is a first (or only) fragment
	}
	return true
}
