package xtablestest

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// tri is the outcome of a match on a traced packet: it cannot match, it
// matches, or it may match (random or stateful matches: the tracer
// follows both outcomes).
type tri uint8

const (
	triNo tri = iota
	triYes
	triMaybe
)

func (t tri) negate(neg bool) tri {
	if !neg || t == triMaybe {
		return t
	}
	if t == triYes {
		return triNo
	}
	return triYes
}

func triOf(b bool) tri {
	if b {
		return triYes
	}
	return triNo
}

// matcher is a compiled match. eval may change st (recent --set records
// the client) only when it reports triYes.
type matcher interface {
	eval(tc *traceCtx, st *pktState) (tri, error)
}

// targetAction is a compiled target extension.
type targetAction interface {
	apply(tc *traceCtx, st *pktState) (end pathEnd, err error)
}

// ErrUnsupported is wrapped by Trace errors about what the Fake accepts
// but the Tracer does not model: a match or target it does not know, or
// an option of a known one (a DNAT range, conntrack --ctstatus, ...).
var ErrUnsupported = errors.New("not supported by the tracer")

func compileMatch(family v1.IPFamily, r *rule, m *match) (matcher, error) {
	switch m.name {
	case "tcp", "udp", "sctp":
		return compilePorts(m)
	case "multiport":
		return compileMultiport(m)
	case "comment", "physdev":
		return alwaysMatcher{}, nil
	case "limit":
		if o, ok := m.get("--limit"); ok {
			if _, ok := parseRate(o.vals[0]); !ok {
				return nil, fmt.Errorf("bad rate %q", o.vals[0])
			}
		}
		if o, ok := m.get("--limit-burst"); ok {
			if n, err := strconv.ParseUint(o.vals[0], 10, 32); err != nil || n == 0 || n > 10000 {
				return nil, fmt.Errorf("bad --limit-burst %q", o.vals[0])
			}
		}
		return alwaysMatcher{}, nil
	case "icmp", "icmp6":
		return unsupportedMatcher{m.name}, nil
	case "addrtype":
		return compileAddrtype(family, m)
	case "statistic":
		return compileStatistic(m)
	case "recent":
		return compileRecent(m)
	case "mark", "connmark":
		o, ok := m.get("--mark")
		if !ok {
			return nil, fmt.Errorf("--mark is required")
		}
		v, mask, err := parseMark(o.vals[0])
		if err != nil {
			return nil, err
		}
		return markMatcher{conn: m.name == "connmark", value: v, mask: mask, neg: o.neg}, nil
	case "conntrack", "state":
		return compileConntrack(family, m)
	case "set":
		return compileSet(m)
	}
	return nil, nil // unknown module: accepted, not evaluable
}

type alwaysMatcher struct{}

func (alwaysMatcher) eval(*traceCtx, *pktState) (tri, error) { return triYes, nil }

type unsupportedMatcher struct{ name string }

func (u unsupportedMatcher) eval(*traceCtx, *pktState) (tri, error) {
	return triNo, fmt.Errorf("match %q: %w", u.name, ErrUnsupported)
}

type portRange struct{ lo, hi int }

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("invalid port %q (service names are not resolved)", s)
	}
	return n, nil
}

func parsePortRange(s string) (portRange, error) {
	lo, hi, isRange := strings.Cut(s, ":")
	if !isRange {
		p, err := parsePort(s)
		return portRange{p, p}, err
	}
	r := portRange{0, 65535}
	var err error
	if lo != "" {
		if r.lo, err = parsePort(lo); err != nil {
			return r, err
		}
	}
	if hi != "" {
		if r.hi, err = parsePort(hi); err != nil {
			return r, err
		}
	}
	if r.lo > r.hi {
		return r, fmt.Errorf("invalid port range %q", s)
	}
	return r, nil
}

func (p portRange) has(port int) bool { return port >= p.lo && port <= p.hi }

type portsMatcher struct {
	dport, sport       *portRange
	dportNeg, sportNeg bool
	syn                *tri // --syn / --tcp-flags outcome for a first packet, precomputed
	unsupported        string
}

func compilePorts(m *match) (matcher, error) {
	pm := &portsMatcher{}
	_, syn := m.get("--syn")
	_, flags := m.get("--tcp-flags")
	if syn && flags {
		return nil, fmt.Errorf("only one of --syn and --tcp-flags is allowed")
	}
	for _, o := range m.opts {
		switch o.name {
		case "--dport", "--sport":
			pr, err := parsePortRange(o.vals[0])
			if err != nil {
				return nil, err
			}
			if o.name == "--dport" {
				pm.dport, pm.dportNeg = &pr, o.neg
			} else {
				pm.sport, pm.sportNeg = &pr, o.neg
			}
		case "--syn":
			t := triYes.negate(o.neg)
			pm.syn = &t
		case "--tcp-flags":
			mask, err := parseTCPFlags(o.vals[0])
			if err != nil {
				return nil, err
			}
			comp, err := parseTCPFlags(o.vals[1])
			if err != nil {
				return nil, err
			}
			// The traced packet opens a connection: only SYN is set.
			t := triOf(tcpSYN&mask == comp).negate(o.neg)
			pm.syn = &t
		default:
			pm.unsupported = o.name
		}
	}
	return pm, nil
}

const (
	tcpFIN = 1 << iota
	tcpSYN
	tcpRST
	tcpPSH
	tcpACK
	tcpURG
	tcpECE
	tcpCWR
)

func parseTCPFlags(s string) (int, error) {
	names := map[string]int{"FIN": tcpFIN, "SYN": tcpSYN, "RST": tcpRST, "PSH": tcpPSH, "ACK": tcpACK,
		"URG": tcpURG, "ECE": tcpECE, "CWR": tcpCWR, "ALL": 0x3f, "NONE": 0}
	f := 0
	for _, n := range strings.Split(s, ",") {
		v, ok := names[strings.ToUpper(n)]
		if !ok {
			return 0, fmt.Errorf("unknown TCP flag %q", n)
		}
		f |= v
	}
	return f, nil
}

func (pm *portsMatcher) eval(tc *traceCtx, st *pktState) (tri, error) {
	if pm.unsupported != "" {
		return triNo, fmt.Errorf("option %s: %w", pm.unsupported, ErrUnsupported)
	}
	if pm.dport != nil && !(pm.dport.has(st.dport) != pm.dportNeg) {
		return triNo, nil
	}
	if pm.sport != nil {
		sport, err := tc.sourcePort()
		if err != nil {
			return triNo, err
		}
		if !(pm.sport.has(sport) != pm.sportNeg) {
			return triNo, nil
		}
	}
	if pm.syn != nil {
		return *pm.syn, nil
	}
	return triYes, nil
}

type multiportMatcher struct {
	ports    []portRange
	src, dst bool
	neg      bool
}

func compileMultiport(m *match) (matcher, error) {
	if len(m.opts) != 1 {
		return nil, fmt.Errorf("exactly one of --dports, --sports, --ports is required")
	}
	o := m.opts[0]
	mm := multiportMatcher{neg: o.neg, src: o.name != "--dports", dst: o.name != "--sports"}
	parts := strings.Split(o.vals[0], ",")
	if len(parts) > 15 {
		return nil, fmt.Errorf("too many ports specified (max 15)")
	}
	for _, p := range parts {
		pr, err := parsePortRange(p)
		if err != nil {
			return nil, err
		}
		mm.ports = append(mm.ports, pr)
	}
	return mm, nil
}

func (mm multiportMatcher) eval(tc *traceCtx, st *pktState) (tri, error) {
	hit := false
	for _, pr := range mm.ports {
		if mm.dst && pr.has(st.dport) {
			hit = true
		}
		if mm.src {
			sport, err := tc.sourcePort()
			if err != nil {
				return triNo, err
			}
			if pr.has(sport) {
				hit = true
			}
		}
	}
	return triOf(hit).negate(mm.neg), nil
}

var addrTypes = map[string]bool{"UNSPEC": true, "UNICAST": true, "LOCAL": true, "BROADCAST": true,
	"ANYCAST": true, "MULTICAST": true, "BLACKHOLE": true, "UNREACHABLE": true, "PROHIBIT": true,
	"THROW": true, "NAT": true, "XRESOLVE": true}

// addrTypesV6 are the types the kernel's addrtype match supports for IPv6.
var addrTypesV6 = map[string]bool{"UNSPEC": true, "UNICAST": true, "LOCAL": true, "ANYCAST": true,
	"MULTICAST": true, "UNREACHABLE": true}

type addrtypeMatcher struct {
	src, dst       map[string]bool
	srcNeg, dstNeg bool
}

func compileAddrtype(family v1.IPFamily, m *match) (matcher, error) {
	am := addrtypeMatcher{}
	parse := func(v string) (map[string]bool, error) {
		set := map[string]bool{}
		for _, t := range strings.Split(v, ",") {
			if !addrTypes[strings.ToUpper(t)] {
				return nil, fmt.Errorf("unknown address type %q", t)
			}
			if family == v1.IPv6Protocol && !addrTypesV6[strings.ToUpper(t)] {
				return nil, fmt.Errorf("address type %s is not supported for IPv6", strings.ToUpper(t))
			}
			set[strings.ToUpper(t)] = true
		}
		return set, nil
	}
	var err error
	for _, o := range m.opts {
		switch o.name {
		case "--src-type":
			if am.src, err = parse(o.vals[0]); err != nil {
				return nil, err
			}
			am.srcNeg = o.neg
		case "--dst-type":
			if am.dst, err = parse(o.vals[0]); err != nil {
				return nil, err
			}
			am.dstNeg = o.neg
		}
	}
	if am.src == nil && am.dst == nil {
		return nil, fmt.Errorf("--src-type or --dst-type is required")
	}
	_, in := m.get("--limit-iface-in")
	_, out := m.get("--limit-iface-out")
	if in && out {
		return nil, fmt.Errorf("--limit-iface-in and --limit-iface-out are exclusive")
	}
	return am, nil
}

func (am addrtypeMatcher) eval(tc *traceCtx, st *pktState) (tri, error) {
	if am.src != nil && am.src[tc.addrType(st.src)] == am.srcNeg {
		return triNo, nil
	}
	if am.dst != nil && am.dst[tc.addrType(st.dst)] == am.dstNeg {
		return triNo, nil
	}
	return triYes, nil
}

type statisticMatcher struct {
	outcome tri
}

func compileStatistic(m *match) (matcher, error) {
	mode, ok := m.get("--mode")
	if !ok {
		return nil, fmt.Errorf("--mode is required")
	}
	prob, hasProb := m.get("--probability")
	every, hasEvery := m.get("--every")
	_, hasPacket := m.get("--packet")
	switch mode.vals[0] {
	case "random":
		if !hasProb || hasEvery || hasPacket {
			return nil, fmt.Errorf("--mode random takes --probability only")
		}
		p, err := strconv.ParseFloat(prob.vals[0], 64)
		if err != nil || p < 0 || p > 1 {
			return nil, fmt.Errorf("--probability %q must be a number between 0 and 1", prob.vals[0])
		}
		t := triMaybe
		switch {
		case p >= 1:
			t = triYes
		case p <= 0:
			t = triNo
		}
		return statisticMatcher{t.negate(prob.neg)}, nil
	case "nth":
		if !hasEvery || !hasPacket || hasProb {
			return nil, fmt.Errorf("--mode nth takes --every and --packet")
		}
		n, err := strconv.Atoi(every.vals[0])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--every %q must be a positive number", every.vals[0])
		}
		t := triMaybe
		if n == 1 {
			t = triYes
		}
		return statisticMatcher{t.negate(every.neg)}, nil
	}
	return nil, fmt.Errorf("unknown --mode %q", mode.vals[0])
}

func (sm statisticMatcher) eval(*traceCtx, *pktState) (tri, error) { return sm.outcome, nil }

type recentMatcher struct {
	name     string
	action   string // --set, --rcheck, --update, --remove
	rdest    bool
	hitcount int
	neg      bool
}

func compileRecent(m *match) (matcher, error) {
	rm := recentMatcher{name: "DEFAULT"}
	for _, o := range m.opts {
		switch o.name {
		case "--set", "--rcheck", "--update", "--remove":
			if rm.action != "" {
				return nil, fmt.Errorf("only one of --set, --rcheck, --update, --remove is allowed")
			}
			rm.action, rm.neg = o.name, o.neg
		case "--name":
			rm.name = o.vals[0]
			if rm.name == "" || len(rm.name) > 200 {
				return nil, fmt.Errorf("invalid --name %q", rm.name)
			}
		case "--rdest":
			rm.rdest = true
		case "--seconds", "--hitcount":
			n, err := strconv.Atoi(o.vals[0])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("invalid %s %q", o.name, o.vals[0])
			}
			if o.name == "--hitcount" {
				rm.hitcount = n
			}
		case "--mask":
			if _, err := netip.ParseAddr(o.vals[0]); err != nil {
				return nil, fmt.Errorf("invalid --mask %q", o.vals[0])
			}
		}
	}
	if rm.action == "" {
		return nil, fmt.Errorf("one of --set, --rcheck, --update or --remove is required")
	}
	_, src := m.get("--rsource")
	if src && rm.rdest {
		return nil, fmt.Errorf("--rsource and --rdest are exclusive")
	}
	_, seconds := m.get("--seconds")
	_, hit := m.get("--hitcount")
	_, reap := m.get("--reap")
	if (seconds || hit || reap) && rm.action != "--rcheck" && rm.action != "--update" {
		return nil, fmt.Errorf("--seconds, --hitcount and --reap need --rcheck or --update")
	}
	if reap && !seconds {
		return nil, fmt.Errorf("--reap needs --seconds")
	}
	return rm, nil
}

func (rm recentMatcher) eval(tc *traceCtx, st *pktState) (tri, error) {
	addr := st.src
	if rm.rdest {
		addr = st.dst
	}
	key := rm.name + "\x00" + addr.String()
	switch rm.action {
	case "--set":
		if !rm.neg {
			st.recordRecent(key)
		}
		return triYes.negate(rm.neg), nil
	case "--remove":
		// Whether an earlier connection left an entry is unknown.
		return triMaybe, nil
	}
	// --rcheck / --update: an entry from an earlier connection of this
	// client may or may not exist; one set earlier on this path does.
	if st.hasRecent(key) && rm.hitcount <= 1 {
		return triYes.negate(rm.neg), nil
	}
	st.checkedRecent = true
	return triMaybe, nil
}

// parseMark parses "value[/mask]" (decimal or 0x hex, 32 bits).
func parseMark(s string) (value, mask uint32, err error) {
	v, m, hasMask := strings.Cut(s, "/")
	vv, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("invalid mark %q", s)
	}
	mask = 0xffffffff
	if hasMask {
		mm, err := strconv.ParseUint(m, 0, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("invalid mark mask %q", s)
		}
		mask = uint32(mm)
	}
	return uint32(vv), mask, nil
}

type markMatcher struct {
	conn        bool
	value, mask uint32
	neg         bool
}

func (mm markMatcher) eval(_ *traceCtx, st *pktState) (tri, error) {
	mark := st.mark
	if mm.conn {
		mark = st.ctmark
	}
	return triOf(mark&mm.mask == mm.value).negate(mm.neg), nil
}

var ctStates = map[string]bool{"NEW": true, "ESTABLISHED": true, "RELATED": true, "INVALID": true,
	"UNTRACKED": true, "SNAT": true, "DNAT": true}

type conntrackMatcher struct {
	states      map[string]bool
	statesNeg   bool
	origDst     *prefixMatch
	origSrc     *prefixMatch
	origDstPort *portRange
	origDstNeg  bool
	proto       string
	protoNeg    bool
	unsupported string
}

func compileConntrack(family v1.IPFamily, m *match) (matcher, error) {
	cm := &conntrackMatcher{}
	for _, o := range m.opts {
		switch o.name {
		case "--ctstate", "--state":
			cm.states = map[string]bool{}
			for _, s := range strings.Split(o.vals[0], ",") {
				s = strings.ToUpper(s)
				if !ctStates[s] || (m.name == "state" && (s == "SNAT" || s == "DNAT")) {
					return nil, fmt.Errorf("unknown state %q", s)
				}
				cm.states[s] = true
			}
			cm.statesNeg = o.neg
		case "--ctorigdst", "--ctorigsrc":
			p, err := parsePrefix(family, o.vals[0])
			if err != nil {
				return nil, err
			}
			pm := &prefixMatch{set: true, neg: o.neg, p: p}
			if o.name == "--ctorigdst" {
				cm.origDst = pm
			} else {
				cm.origSrc = pm
			}
		case "--ctorigdstport":
			pr, err := parsePortRange(o.vals[0])
			if err != nil {
				return nil, err
			}
			cm.origDstPort, cm.origDstNeg = &pr, o.neg
		case "--ctproto":
			p, err := normalizeProto(o.vals[0])
			if err != nil {
				return nil, err
			}
			cm.proto, cm.protoNeg = p, o.neg
		case "--ctdir":
			if v := strings.ToUpper(o.vals[0]); v != "ORIGINAL" && v != "REPLY" {
				return nil, fmt.Errorf("--ctdir must be ORIGINAL or REPLY")
			}
			if strings.ToUpper(o.vals[0]) == "REPLY" {
				cm.unsupported = "--ctdir REPLY"
			}
		default:
			cm.unsupported = o.name
		}
	}
	return cm, nil
}

func (cm *conntrackMatcher) eval(_ *traceCtx, st *pktState) (tri, error) {
	if cm.unsupported != "" {
		return triNo, fmt.Errorf("conntrack %s: %w", cm.unsupported, ErrUnsupported)
	}
	if cm.states != nil {
		// The traced packet opens a new connection: it is never
		// ESTABLISHED, RELATED or INVALID.
		hit := (cm.states["NEW"]) ||
			(cm.states["DNAT"] && st.dnat) ||
			(cm.states["SNAT"] && st.snat) ||
			(cm.states["UNTRACKED"] && st.untracked)
		if st.untracked {
			hit = cm.states["UNTRACKED"]
		}
		if hit == cm.statesNeg {
			return triNo, nil
		}
	}
	if cm.origDst != nil && cm.origDst.p.Contains(st.origDst) == cm.origDst.neg {
		return triNo, nil
	}
	if cm.origSrc != nil && cm.origSrc.p.Contains(st.origSrc) == cm.origSrc.neg {
		return triNo, nil
	}
	if cm.origDstPort != nil && cm.origDstPort.has(st.origDport) == cm.origDstNeg {
		return triNo, nil
	}
	if cm.proto != "" && (cm.proto == st.proto) == cm.protoNeg {
		return triNo, nil
	}
	return triYes, nil
}

type setMatcher struct {
	name        string
	flags       []string
	neg         bool
	unsupported string
}

func compileSet(m *match) (matcher, error) {
	o, ok := m.get("--match-set")
	if !ok {
		return nil, fmt.Errorf("--match-set is required")
	}
	sm := setMatcher{name: o.vals[0], neg: o.neg}
	for _, f := range strings.Split(o.vals[1], ",") {
		if f != "src" && f != "dst" {
			return nil, fmt.Errorf("invalid --match-set flag %q (want src or dst)", f)
		}
		sm.flags = append(sm.flags, f)
	}
	if len(sm.flags) > 6 {
		return nil, fmt.Errorf("too many --match-set flags")
	}
	for _, o := range m.opts {
		if o.name != "--match-set" {
			sm.unsupported = o.name
		}
	}
	return sm, nil
}

func (sm setMatcher) eval(tc *traceCtx, st *pktState) (tri, error) {
	if sm.unsupported != "" {
		return triNo, fmt.Errorf("set match option %s: %w", sm.unsupported, ErrUnsupported)
	}
	if tc.cfg.IPSetMatch == nil {
		return triNo, fmt.Errorf("rule matches ipset %q but TracerConfig.IPSetMatch is nil", sm.name)
	}
	q := IPSetQuery{Set: sm.name, Flags: sm.flags, Protocol: protocolOf(st.proto)}
	for _, f := range sm.flags {
		if f == "src" {
			sport, _ := tc.sourcePort()
			q.Addrs = append(q.Addrs, st.src)
			q.Ports = append(q.Ports, sport)
		} else {
			q.Addrs = append(q.Addrs, st.dst)
			q.Ports = append(q.Ports, st.dport)
		}
	}
	ok, err := tc.cfg.IPSetMatch(q)
	if err != nil {
		return triNo, fmt.Errorf("ipset %q: %w", sm.name, err)
	}
	return triOf(ok).negate(sm.neg), nil
}

func protocolOf(p string) v1.Protocol {
	switch p {
	case "tcp":
		return v1.ProtocolTCP
	case "udp":
		return v1.ProtocolUDP
	case "sctp":
		return v1.ProtocolSCTP
	}
	return v1.Protocol(strings.ToUpper(p))
}

// Targets.

func compileTarget(family v1.IPFamily, r *rule) (targetAction, error) {
	get := func(name string) (opt, bool) {
		for _, o := range r.targetOpts {
			if o.name == name {
				return o, true
			}
		}
		return opt{}, false
	}
	switch r.target {
	case "ACCEPT", "DROP", "RETURN":
		return nil, nil
	case "DNAT", "SNAT":
		name := "--to-destination"
		if r.target == "SNAT" {
			name = "--to-source"
		}
		o, ok := get(name)
		if !ok {
			return nil, fmt.Errorf("%s is required", name)
		}
		na, err := parseNATAddr(family, o.vals[0])
		if err != nil {
			return nil, err
		}
		if na.port != 0 && !portProto(r) {
			return nil, fmt.Errorf("a port in %s needs -p tcp, udp, sctp, dccp or icmp", name)
		}
		if r.target == "DNAT" {
			return dnatTarget{na}, nil
		}
		return snatTarget{na}, nil
	case "REDIRECT":
		rt := redirectTarget{family: family}
		if o, ok := get("--to-ports"); ok {
			lo, hi, isRange := strings.Cut(o.vals[0], "-")
			p, err := strconv.Atoi(lo)
			if err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("invalid --to-ports %q", o.vals[0])
			}
			if isRange && hi != lo {
				q, err := strconv.Atoi(hi)
				if err != nil || q < p || q > 65535 {
					return nil, fmt.Errorf("invalid --to-ports %q", o.vals[0])
				}
				rt.ranged = true
			}
			if !portProto(r) {
				return nil, fmt.Errorf("--to-ports needs -p tcp, udp, sctp, dccp or icmp")
			}
			rt.port = p
		}
		return rt, nil
	case "MASQUERADE":
		if o, ok := get("--to-ports"); ok {
			lo, hi, _ := strings.Cut(o.vals[0], "-")
			p, err1 := strconv.Atoi(lo)
			q := p
			var err2 error
			if hi != "" {
				q, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || p < 1 || q < p || q > 65535 {
				return nil, fmt.Errorf("invalid --to-ports %q", o.vals[0])
			}
			if !portProto(r) {
				return nil, fmt.Errorf("--to-ports needs -p tcp, udp, sctp, dccp or icmp")
			}
			return masqueradeTarget{unsupported: "--to-ports"}, nil
		}
		return masqueradeTarget{}, nil
	case "MARK":
		if len(r.targetOpts) != 1 {
			return nil, fmt.Errorf("exactly one of --set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark is required")
		}
		o := r.targetOpts[0]
		v, mask, err := parseMark(o.vals[0])
		if err != nil {
			return nil, err
		}
		if o.name != "--set-xmark" && o.name != "--set-mark" && strings.Contains(o.vals[0], "/") {
			return nil, fmt.Errorf("%s takes no mask", o.name)
		}
		return markTarget{op: o.name, value: v, mask: mask}, nil
	case "CONNMARK":
		return compileConnmark(r.targetOpts)
	case "REJECT":
		if o, ok := get("--reject-with"); ok && !validRejectWith(family, o.vals[0]) {
			return nil, fmt.Errorf("unknown --reject-with %q", o.vals[0])
		} else if ok && (o.vals[0] == "tcp-reset" || o.vals[0] == "tcp-rst") && (r.proto != "tcp" || r.protoNeg) {
			return nil, fmt.Errorf("--reject-with tcp-reset needs -p tcp")
		}
		return rejectTarget{}, nil
	case "LOG":
		if o, ok := get("--log-level"); ok {
			if _, known := logLevels[strings.ToLower(o.vals[0])]; !known {
				return nil, fmt.Errorf("unknown --log-level %q", o.vals[0])
			}
		}
		if o, ok := get("--log-prefix"); ok && len(o.vals[0]) > 29 {
			return nil, fmt.Errorf("--log-prefix %q longer than 29 characters", o.vals[0])
		}
		return continueTarget{}, nil
	case "NFLOG", "TCPMSS", "CHECKSUM", "TRACE":
		return continueTarget{}, nil
	case "NOTRACK":
		return notrackTarget{}, nil
	case "CT":
		if _, ok := get("--notrack"); ok {
			if len(r.targetOpts) != 1 {
				return nil, fmt.Errorf("--notrack takes no other options")
			}
			return notrackTarget{}, nil
		}
		return unsupportedTarget{"CT"}, nil
	}
	return unsupportedTarget{r.target}, nil
}

func validRejectWith(family v1.IPFamily, s string) bool {
	v4 := []string{"icmp-net-unreachable", "icmp-host-unreachable", "icmp-port-unreachable",
		"icmp-proto-unreachable", "icmp-net-prohibited", "icmp-host-prohibited", "icmp-admin-prohibited",
		"net-unreach", "host-unreach", "port-unreach", "proto-unreach", "net-prohib", "host-prohib",
		"admin-prohib", "tcp-reset", "tcp-rst"}
	v6 := []string{"icmp6-no-route", "no-route", "icmp6-adm-prohibited", "adm-prohibited",
		"icmp6-addr-unreachable", "addr-unreach", "icmp6-port-unreachable", "port-unreach",
		"icmp6-policy-fail", "policy-fail", "icmp6-reject-route", "reject-route", "tcp-reset", "tcp-rst"}
	list := v4
	if family == v1.IPv6Protocol {
		list = v6
	}
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}

type natAddr struct {
	addr netip.Addr
	port int // 0 = unchanged
	raw  string
	// ranged holds an address or port range the tracer cannot collapse.
	ranged bool
}

// parseNATAddr parses a --to-destination / --to-source value:
// "a.b.c.d", "a.b.c.d:port", "[v6]", "[v6]:port", or ranges of either.
func parseNATAddr(family v1.IPFamily, s string) (natAddr, error) {
	na := natAddr{raw: s}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return na, fmt.Errorf("invalid address %q", s)
		}
		host = s[1:end]
		rest := s[end+1:]
		if rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return na, fmt.Errorf("invalid address %q", s)
			}
			port = rest[1:]
		}
	} else if family == v1.IPv4Protocol {
		host, port, _ = strings.Cut(s, ":")
	} else if strings.Count(s, ":") == 1 {
		return na, fmt.Errorf("invalid IPv6 address %q (write [addr]:port)", s)
	}
	if lo, hi, ok := strings.Cut(host, "-"); ok {
		a, err1 := netip.ParseAddr(lo)
		b, err2 := netip.ParseAddr(hi)
		if err1 != nil || err2 != nil || a.Is6() != (family == v1.IPv6Protocol) || b.Is6() != a.Is6() || b.Less(a) {
			return na, fmt.Errorf("invalid address range %q", host)
		}
		na.addr, na.ranged = a, a != b
	} else if host != "" {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" {
			return na, fmt.Errorf("invalid address %q", host)
		}
		if a.Is6() != (family == v1.IPv6Protocol) || a.Is4In6() {
			return na, fmt.Errorf("%q is not an %s address", host, family)
		}
		na.addr = a
	}
	if port != "" {
		lo, hi, isRange := strings.Cut(port, "-")
		p, err := strconv.Atoi(lo)
		if err != nil || p < 1 || p > 65535 {
			return na, fmt.Errorf("invalid port %q", port)
		}
		na.port = p
		if isRange {
			q, err := strconv.Atoi(hi)
			if err != nil || q < p || q > 65535 {
				return na, fmt.Errorf("invalid port range %q", port)
			}
			na.ranged = na.ranged || q != p
		}
	}
	return na, nil
}

type continueTarget struct{}

func (continueTarget) apply(*traceCtx, *pktState) (pathEnd, error) { return endContinue, nil }

type unsupportedTarget struct{ name string }

func (u unsupportedTarget) apply(*traceCtx, *pktState) (pathEnd, error) {
	return endContinue, fmt.Errorf("target %q: %w", u.name, ErrUnsupported)
}

type rejectTarget struct{}

func (rejectTarget) apply(tc *traceCtx, _ *pktState) (pathEnd, error) {
	if !tc.hookIs("INPUT", "FORWARD", "OUTPUT") {
		return endContinue, fmt.Errorf("REJECT in %s: the kernel only allows it in INPUT, FORWARD and OUTPUT", tc.hook)
	}
	return endReject, nil
}

type notrackTarget struct{}

func (notrackTarget) apply(_ *traceCtx, st *pktState) (pathEnd, error) {
	st.untracked = true
	return endContinue, nil
}

type dnatTarget struct{ to natAddr }

func (d dnatTarget) apply(tc *traceCtx, st *pktState) (pathEnd, error) {
	if d.to.ranged {
		return endContinue, fmt.Errorf("DNAT to range %q: %w", d.to.raw, ErrUnsupported)
	}
	if !tc.hookIs("PREROUTING", "OUTPUT") {
		return endContinue, fmt.Errorf("DNAT in %s: the kernel only allows it in PREROUTING and OUTPUT", tc.hook)
	}
	if d.to.addr.IsValid() {
		st.dst = d.to.addr
	}
	if d.to.port != 0 {
		st.dport = d.to.port
	}
	st.dnat = true
	return endAccept, nil
}

type snatTarget struct{ to natAddr }

func (s snatTarget) apply(tc *traceCtx, st *pktState) (pathEnd, error) {
	if !tc.hookIs("POSTROUTING", "INPUT") {
		return endContinue, fmt.Errorf("SNAT in %s: the kernel only allows it in POSTROUTING and INPUT", tc.hook)
	}
	if s.to.addr.IsValid() {
		st.src = s.to.addr
	}
	st.snat = true
	st.masqueraded = true
	return endAccept, nil
}

type masqueradeTarget struct{ unsupported string }

func (m masqueradeTarget) apply(tc *traceCtx, st *pktState) (pathEnd, error) {
	if m.unsupported != "" {
		return endContinue, fmt.Errorf("MASQUERADE %s: %w", m.unsupported, ErrUnsupported)
	}
	if !tc.hookIs("POSTROUTING") {
		return endContinue, fmt.Errorf("MASQUERADE in %s: the kernel only allows it in POSTROUTING", tc.hook)
	}
	st.snat = true
	st.masqueraded = true
	return endAccept, nil
}

type markTarget struct {
	op          string
	value, mask uint32
}

func (m markTarget) apply(_ *traceCtx, st *pktState) (pathEnd, error) {
	st.mark = applyMark(st.mark, m.op, m.value, m.mask)
	return endContinue, nil
}

func applyMark(mark uint32, op string, value, mask uint32) uint32 {
	switch op {
	case "--set-xmark":
		return (mark &^ mask) ^ value
	case "--set-mark":
		return (mark &^ mask) | value
	case "--and-mark":
		return mark & value
	case "--or-mark":
		return mark | value
	case "--xor-mark":
		return mark ^ value
	}
	return mark
}

type connmarkTarget struct {
	op             string
	value, mask    uint32
	nfmask, ctmask uint32
}

func compileConnmark(opts []opt) (targetAction, error) {
	ct := connmarkTarget{nfmask: 0xffffffff, ctmask: 0xffffffff}
	masks := false
	for _, o := range opts {
		switch o.name {
		case "--set-xmark", "--set-mark", "--and-mark", "--or-mark", "--xor-mark":
			if ct.op != "" {
				return nil, fmt.Errorf("only one action is allowed")
			}
			v, m, err := parseMark(o.vals[0])
			if err != nil {
				return nil, err
			}
			ct.op, ct.value, ct.mask = o.name, v, m
		case "--save-mark", "--restore-mark":
			if ct.op != "" {
				return nil, fmt.Errorf("only one action is allowed")
			}
			ct.op = o.name
		case "--nfmask", "--ctmask", "--mask":
			v, err := strconv.ParseUint(o.vals[0], 0, 32)
			if err != nil {
				return nil, fmt.Errorf("invalid %s %q", o.name, o.vals[0])
			}
			masks = true
			if o.name != "--ctmask" {
				ct.nfmask = uint32(v)
			}
			if o.name != "--nfmask" {
				ct.ctmask = uint32(v)
			}
		}
	}
	if ct.op == "" {
		return nil, fmt.Errorf("an action is required")
	}
	if masks && ct.op != "--save-mark" && ct.op != "--restore-mark" {
		return nil, fmt.Errorf("--nfmask, --ctmask and --mask go with --save-mark or --restore-mark")
	}
	return ct, nil
}

func (c connmarkTarget) apply(_ *traceCtx, st *pktState) (pathEnd, error) {
	switch c.op {
	case "--save-mark":
		st.ctmark = (st.ctmark &^ c.ctmask) ^ (st.mark & c.nfmask)
	case "--restore-mark":
		st.mark = (st.mark &^ c.nfmask) ^ (st.ctmark & c.ctmask)
	default:
		st.ctmark = applyMark(st.ctmark, c.op, c.value, c.mask)
	}
	return endContinue, nil
}

// redirectTarget is REDIRECT: DNAT to the node itself. From PREROUTING the
// kernel uses the primary address of the incoming interface; the tracer
// uses the first of TracerConfig.NodeIPs. From OUTPUT it is loopback.
type redirectTarget struct {
	family v1.IPFamily
	port   int // 0 = unchanged
	ranged bool
}

func (rt redirectTarget) apply(tc *traceCtx, st *pktState) (pathEnd, error) {
	if rt.ranged {
		return endContinue, fmt.Errorf("REDIRECT to a port range: %w", ErrUnsupported)
	}
	switch tc.hook {
	case "PREROUTING":
		if len(tc.cfg.NodeIPs) == 0 {
			return endContinue, fmt.Errorf("REDIRECT in PREROUTING needs TracerConfig.NodeIPs (the address it redirects to)")
		}
		st.dst = tc.cfg.NodeIPs[0]
	case "OUTPUT":
		st.dst = netip.IPv6Loopback()
		if rt.family == v1.IPv4Protocol {
			st.dst = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	default:
		return endContinue, fmt.Errorf("REDIRECT in %s: the kernel only allows it in PREROUTING and OUTPUT", tc.hook)
	}
	if rt.port != 0 {
		st.dport = rt.port
	}
	st.dnat = true
	return endAccept, nil
}

// portProto reports whether a NAT target of r may name a port: iptables
// wants -p tcp, udp, sctp, dccp or icmp, or a negated -p.
func portProto(r *rule) bool {
	if r.protoNeg {
		return true
	}
	switch r.proto {
	case "tcp", "udp", "sctp", "dccp", "icmp", "udplite":
		return true
	}
	return false
}
