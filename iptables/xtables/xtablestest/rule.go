package xtablestest

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// maxChainNameLen is the longest chain name the kernel accepts
// (XT_EXTENSION_MAXNAMELEN minus the terminating NUL).
const maxChainNameLen = 28

// maxIfaceNameLen is IFNAMSIZ minus the terminating NUL.
const maxIfaceNameLen = 15

// tableOrder is the fixed order in which Dump prints tables: the order in
// which a packet meets them at one hook.
var tableOrder = []xtables.Table{"raw", xtables.TableMangle, xtables.TableNAT, xtables.TableFilter, "security"}

// builtinChains lists each table's built-in chains in hook order.
var builtinChains = map[xtables.Table][]xtables.Chain{
	"raw":               {xtables.ChainPrerouting, xtables.ChainOutput},
	xtables.TableMangle: {xtables.ChainPrerouting, xtables.ChainInput, xtables.ChainForward, xtables.ChainOutput, xtables.ChainPostrouting},
	xtables.TableNAT:    {xtables.ChainPrerouting, xtables.ChainInput, xtables.ChainOutput, xtables.ChainPostrouting},
	xtables.TableFilter: {xtables.ChainInput, xtables.ChainForward, xtables.ChainOutput},
	"security":          {xtables.ChainInput, xtables.ChainForward, xtables.ChainOutput},
}

func isBuiltinChain(table xtables.Table, chain xtables.Chain) bool {
	for _, c := range builtinChains[table] {
		if c == chain {
			return true
		}
	}
	return false
}

func isBuiltinChainName(chain xtables.Chain) bool {
	switch chain {
	case xtables.ChainPrerouting, xtables.ChainInput, xtables.ChainForward, xtables.ChainOutput, xtables.ChainPostrouting:
		return true
	}
	return false
}

// optSpec describes the options of one match module or target extension:
// option name to number of values, and aliases to the canonical name.
type optSpec struct {
	opts    map[string]int
	aliases map[string]string
	// proto, for protocol matches (tcp, udp, ...), is the -p value they need.
	proto string
	// protos, for multiport, lists acceptable -p values.
	protos []string
	// family restricts a module to one IP family ("" = both).
	family v1.IPFamily
	// tables restricts a target to some tables (nil = all); notIn
	// excludes some.
	tables, notIn []xtables.Table
	// hooks restricts a target to the chains of some hooks (nil = all).
	hooks []xtables.Chain
}

func (s *optSpec) lookup(name string) (string, int, bool) {
	if s == nil {
		return "", 0, false
	}
	if a, ok := s.aliases[name]; ok {
		name = a
	}
	n, ok := s.opts[name]
	return name, n, ok
}

var portAliases = map[string]string{"--destination-port": "--dport", "--source-port": "--sport"}

// matchModules are the match extensions the fake knows the options of. A
// module not listed here is still accepted (the kernel may well have it);
// its options are parsed generically and the Tracer refuses to evaluate it.
var matchModules = map[string]*optSpec{
	"tcp":       {opts: map[string]int{"--dport": 1, "--sport": 1, "--tcp-flags": 2, "--syn": 0, "--tcp-option": 1}, aliases: portAliases, proto: "tcp"},
	"udp":       {opts: map[string]int{"--dport": 1, "--sport": 1}, aliases: portAliases, proto: "udp"},
	"sctp":      {opts: map[string]int{"--dport": 1, "--sport": 1, "--chunk-types": 2}, aliases: portAliases, proto: "sctp"},
	"icmp":      {opts: map[string]int{"--icmp-type": 1}, proto: "icmp", family: v1.IPv4Protocol},
	"icmp6":     {opts: map[string]int{"--icmpv6-type": 1}, proto: "ipv6-icmp", family: v1.IPv6Protocol},
	"comment":   {opts: map[string]int{"--comment": 1}},
	"addrtype":  {opts: map[string]int{"--src-type": 1, "--dst-type": 1, "--limit-iface-in": 0, "--limit-iface-out": 0}},
	"statistic": {opts: map[string]int{"--mode": 1, "--probability": 1, "--every": 1, "--packet": 1}},
	"recent": {opts: map[string]int{"--name": 1, "--set": 0, "--rcheck": 0, "--update": 0, "--remove": 0,
		"--seconds": 1, "--reap": 0, "--hitcount": 1, "--rttl": 0, "--rsource": 0, "--rdest": 0, "--mask": 1}},
	"mark":     {opts: map[string]int{"--mark": 1}},
	"connmark": {opts: map[string]int{"--mark": 1}},
	"conntrack": {opts: map[string]int{"--ctstate": 1, "--ctproto": 1, "--ctorigsrc": 1, "--ctorigdst": 1,
		"--ctreplsrc": 1, "--ctrepldst": 1, "--ctorigsrcport": 1, "--ctorigdstport": 1, "--ctreplsrcport": 1,
		"--ctrepldstport": 1, "--ctstatus": 1, "--ctexpire": 1, "--ctdir": 1}},
	"state": {opts: map[string]int{"--state": 1}},
	"set": {opts: map[string]int{"--match-set": 2, "--return-nomatch": 0, "--update-counters": 0,
		"--update-subcounters": 0, "--packets-eq": 1, "--packets-lt": 1, "--packets-gt": 1,
		"--bytes-eq": 1, "--bytes-lt": 1, "--bytes-gt": 1}},
	"physdev": {opts: map[string]int{"--physdev-in": 1, "--physdev-out": 1, "--physdev-is-in": 0,
		"--physdev-is-out": 0, "--physdev-is-bridged": 0}},
	"multiport": {opts: map[string]int{"--dports": 1, "--sports": 1, "--ports": 1},
		aliases: map[string]string{"--destination-ports": "--dports", "--source-ports": "--sports"},
		protos:  []string{"tcp", "udp", "sctp", "udplite", "dccp"}},
	"limit": {opts: map[string]int{"--limit": 1, "--limit-burst": 1}},
}

var natOnly = []xtables.Table{xtables.TableNAT}
var rawOnly = []xtables.Table{"raw"}

// targets are the target extensions the kernel offers (those a
// service proxy or CNI agent plausibly uses). A -j naming neither one of
// these nor an existing user chain is an error, as with the real tool.
var targets = map[string]*optSpec{
	"ACCEPT":     {},
	"DROP":       {notIn: natOnly},
	"RETURN":     {},
	"QUEUE":      {},
	"NFQUEUE":    {opts: map[string]int{"--queue-num": 1, "--queue-balance": 1, "--queue-bypass": 0, "--queue-cpu-fanout": 0}},
	"DNAT":       {opts: map[string]int{"--to-destination": 1, "--random": 0, "--persistent": 0}, tables: natOnly, hooks: []xtables.Chain{xtables.ChainPrerouting, xtables.ChainOutput}},
	"SNAT":       {opts: map[string]int{"--to-source": 1, "--random": 0, "--random-fully": 0, "--persistent": 0}, tables: natOnly, hooks: []xtables.Chain{xtables.ChainPostrouting, xtables.ChainInput}},
	"MASQUERADE": {opts: map[string]int{"--to-ports": 1, "--random": 0, "--random-fully": 0}, tables: natOnly, hooks: []xtables.Chain{xtables.ChainPostrouting}},
	"REDIRECT":   {opts: map[string]int{"--to-ports": 1, "--random": 0}, tables: natOnly, hooks: []xtables.Chain{xtables.ChainPrerouting, xtables.ChainOutput}},
	"MARK":       {opts: map[string]int{"--set-xmark": 1, "--set-mark": 1, "--and-mark": 1, "--or-mark": 1, "--xor-mark": 1}},
	"CONNMARK": {opts: map[string]int{"--set-xmark": 1, "--set-mark": 1, "--and-mark": 1, "--or-mark": 1,
		"--xor-mark": 1, "--save-mark": 0, "--restore-mark": 0, "--nfmask": 1, "--ctmask": 1, "--mask": 1}},
	"REJECT": {opts: map[string]int{"--reject-with": 1}, tables: []xtables.Table{xtables.TableFilter}, hooks: []xtables.Chain{xtables.ChainInput, xtables.ChainForward, xtables.ChainOutput}},
	"LOG": {opts: map[string]int{"--log-prefix": 1, "--log-level": 1, "--log-tcp-sequence": 0,
		"--log-tcp-options": 0, "--log-ip-options": 0, "--log-uid": 0, "--log-macdecode": 0}},
	"NFLOG": {opts: map[string]int{"--nflog-group": 1, "--nflog-prefix": 1, "--nflog-range": 1,
		"--nflog-threshold": 1, "--nflog-size": 1}},
	"NOTRACK": {tables: rawOnly},
	"CT": {opts: map[string]int{"--notrack": 0, "--zone": 1, "--helper": 1, "--ctevents": 1,
		"--expevents": 1, "--timeout": 1}, tables: rawOnly},
	"TCPMSS":   {opts: map[string]int{"--set-mss": 1, "--clamp-mss-to-pmtu": 0}},
	"CHECKSUM": {opts: map[string]int{"--checksum-fill": 0}},
	"TRACE":    {tables: rawOnly},
}

// opt is one option of a match or target, as written.
type opt struct {
	name string
	neg  bool
	vals []string
}

// match is one -m (or implicit protocol) match of a rule.
type match struct {
	name     string
	opts     []opt
	implicit bool
	// m is the compiled matcher, nil for modules the tracer does not know.
	m matcher
}

func (m *match) get(name string) (opt, bool) {
	for _, o := range m.opts {
		if o.name == name {
			return o, true
		}
	}
	return opt{}, false
}

type prefixMatch struct {
	set bool
	neg bool
	p   netip.Prefix
}

type ifaceMatch struct {
	set  bool
	neg  bool
	name string
}

func (i ifaceMatch) matches(iface string) bool {
	if !i.set {
		return true
	}
	var ok bool
	if base, wild := strings.CutSuffix(i.name, "+"); wild {
		ok = iface != "" && strings.HasPrefix(iface, base)
	} else {
		ok = iface == i.name
	}
	return ok != i.neg
}

// rule is one parsed rule: its identity (the normalized argument list),
// its rendering and the compiled form the tracer evaluates.
type rule struct {
	// spec is the normalized argument list, as iptables-save prints it.
	spec []string
	// key identifies the rule: two rules the kernel considers the same
	// (for -D and -C) have the same key.
	key string
	// rendered caches text().
	rendered string

	src, dst prefixMatch
	in, out  ifaceMatch
	proto    string // "" = any
	protoNeg bool
	fragment *bool // nil: no -f; true: -f; false: ! -f

	matches []*match

	target     string // "" when the rule has no -j/-g
	goTo       bool
	targetOpts []opt
	// t is the compiled target for extension targets (nil for verdicts and chains).
	t targetAction
}

// text renders the rule as iptables-save prints it after "-A CHAIN ".
// It is computed once (rules are immutable; callers hold the Fake's lock).
func (r *rule) text() string {
	if r.rendered == "" {
		r.rendered = r.renderText()
	}
	return r.rendered
}

func (r *rule) renderText() string {
	var b strings.Builder
	for i, a := range r.spec {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteArg(a, i > 0 && r.spec[i-1] == "--comment"))
	}
	return b.String()
}

// jumpsTo returns the user chain the rule jumps or goes to, or "".
func (r *rule) jumpsTo() xtables.Chain {
	if r.target == "" {
		return ""
	}
	if _, ok := targets[r.target]; ok {
		return ""
	}
	return xtables.Chain(r.target)
}

// quoteArg quotes an argument for iptables-restore input. Comment text is
// quoted unless it is plain (as iptables-save does); anything else only
// when it would not survive splitting.
func quoteArg(a string, isComment bool) string {
	needs := a == ""
	for _, c := range a {
		switch {
		case c == ' ' || c == '\t' || c == '"' || c == '\\' || c == '\'':
			needs = true
		case isComment && !(c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')):
			needs = true
		}
	}
	if !needs {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range a {
		if c == '"' || c == '\\' || c == '\'' {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	b.WriteByte('"')
	return b.String()
}

// splitArgs splits one line of iptables-restore input into arguments the
// way iptables-restore does: on blanks; a double quote at the start of an
// argument groups up to the closing quote, which ends the argument;
// inside quotes a backslash makes the next character literal. Outside
// quotes a backslash is an ordinary character.
func splitArgs(line string) ([]string, error) {
	if !strings.Contains(line, `"`) {
		// Fast path: one copy of the line (so rules do not keep a whole
		// restore input alive), arguments sliced from it.
		return strings.FieldsFunc(strings.Clone(line), func(r rune) bool {
			return r == ' ' || r == '\t' || r == '\n' || r == '\r'
		}), nil
	}
	var args []string
	var cur strings.Builder
	inArg, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			i++
		case quoted && c == '"':
			args = append(args, cur.String())
			cur.Reset()
			inArg, quoted = false, false
			if i+1 < len(line) && line[i+1] != ' ' && line[i+1] != '\t' {
				return nil, fmt.Errorf("%w: text right after a closing quote", ErrBadRule)
			}
		case !quoted && c == '"' && !inArg:
			quoted = true
		case !quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("%w: unterminated quoted string", ErrBadRule)
	}
	if inArg {
		args = append(args, cur.String())
	}
	return args, nil
}

var protoNumbers = map[string]string{
	"6": "tcp", "17": "udp", "132": "sctp", "1": "icmp", "58": "ipv6-icmp", "136": "udplite",
	"33": "dccp", "47": "gre", "50": "esp", "51": "ah",
}

func normalizeProto(p string) (string, error) {
	p = strings.ToLower(p)
	if n, ok := protoNumbers[p]; ok {
		return n, nil
	}
	switch p {
	case "icmpv6", "icmp6":
		return "ipv6-icmp", nil
	case "tcp", "udp", "sctp", "icmp", "ipv6-icmp", "udplite", "dccp", "gre", "esp", "ah", "all":
		return p, nil
	}
	if n, err := strconv.Atoi(p); err == nil && n >= 0 && n <= 255 {
		if n == 0 {
			return "all", nil
		}
		return p, nil
	}
	return "", fmt.Errorf("%w: unknown protocol %q", ErrBadRule, p)
}

// parsePrefix parses an -s/-d value the way iptables does: an address
// (host prefix), an address/length or an address/dotted-mask.
func parsePrefix(family v1.IPFamily, s string) (netip.Prefix, error) {
	if strings.Contains(s, ",") {
		return netip.Prefix{}, fmt.Errorf("%w: address lists (%q) expand to several rules; write one rule per address", ErrBadRule, s)
	}
	addrPart, lenPart, hasLen := strings.Cut(s, "/")
	addr, err := netip.ParseAddr(addrPart)
	if err != nil || addr.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%w: host/network %q not found", ErrBadRule, s)
	}
	addr = addr.Unmap()
	if (family == v1.IPv6Protocol) != addr.Is6() {
		return netip.Prefix{}, fmt.Errorf("%w: %q is not an %s address", ErrBadRule, s, family)
	}
	bits := addr.BitLen()
	if hasLen {
		if n, err := strconv.Atoi(lenPart); err == nil && n >= 0 && n <= addr.BitLen() {
			bits = n
		} else if m, err := netip.ParseAddr(lenPart); err == nil && m.Is4() && addr.Is4() {
			b := m.As4()
			v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			ones := 0
			for v&0x80000000 != 0 {
				ones++
				v <<= 1
			}
			if v != 0 {
				return netip.Prefix{}, fmt.Errorf("%w: non-contiguous mask in %q", ErrBadRule, s)
			}
			bits = ones
		} else {
			return netip.Prefix{}, fmt.Errorf("%w: invalid mask in %q", ErrBadRule, s)
		}
	}
	return netip.PrefixFrom(addr, bits).Masked(), nil
}

func validIfaceName(s string) bool {
	if s == "" || len(s) > maxIfaceNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '/' || c == ' ' || c == ':' || (c == '+' && i != len(s)-1) {
			return false
		}
	}
	return true
}

// validateChainName checks a user chain name as iptables -N does.
func validateChainName(chain xtables.Chain) error {
	s := string(chain)
	switch {
	case s == "":
		return fmt.Errorf("%w: empty chain name", ErrBadRule)
	case len(s) > maxChainNameLen:
		return fmt.Errorf("%w: chain name %q longer than %d characters", ErrBadRule, s, maxChainNameLen)
	case strings.HasPrefix(s, "-") || s == "!":
		return fmt.Errorf("%w: invalid chain name %q", ErrBadRule, s)
	case strings.ContainsAny(s, "\"'") || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f || unicode.IsSpace(r) }) >= 0:
		return fmt.Errorf("%w: invalid chain name %q", ErrBadRule, s)
	}
	if _, ok := targets[s]; ok {
		return fmt.Errorf("%w: chain name %q is a target name", ErrBadRule, s)
	}
	if isBuiltinChainName(chain) {
		return fmt.Errorf("%w: chain name %q is a built-in chain name", ErrBadRule, s)
	}
	return nil
}

// parseRule parses a rule specification (the arguments after "-A CHAIN").
// Whether a jump target chain exists is checked by the caller.
func parseRule(family v1.IPFamily, table xtables.Table, args []string) (*rule, error) {
	r := &rule{}
	neg := false
	need := func(i int, flag string) (string, error) {
		if i+1 >= len(args) {
			return "", fmt.Errorf("%w: option %q requires an argument", ErrBadRule, flag)
		}
		return args[i+1], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "!" {
			if neg {
				return nil, fmt.Errorf("%w: multiple consecutive ! not allowed", ErrBadRule)
			}
			neg = true
			continue
		}
		switch a {
		case "-s", "--source", "--src", "-d", "--destination", "--dst":
			v, err := need(i, a)
			if err != nil {
				return nil, err
			}
			i++
			p, err := parsePrefix(family, v)
			if err != nil {
				return nil, err
			}
			if neg && p.Bits() == 0 {
				// iptables-nft refuses it (iptables-legacy accepts a rule that never matches).
				return nil, fmt.Errorf("%w: ! %s %s never matches", ErrBadRule, a, v)
			}
			pm := &r.src
			if a == "-d" || a == "--destination" || a == "--dst" {
				pm = &r.dst
			}
			if pm.set {
				return nil, fmt.Errorf("%w: multiple %s flags not allowed", ErrBadRule, a)
			}
			*pm = prefixMatch{set: true, neg: neg, p: p}
		case "-i", "--in-interface", "-o", "--out-interface":
			v, err := need(i, a)
			if err != nil {
				return nil, err
			}
			i++
			if !validIfaceName(v) {
				return nil, fmt.Errorf("%w: invalid interface name %q", ErrBadRule, v)
			}
			im := &r.in
			if a == "-o" || a == "--out-interface" {
				im = &r.out
			}
			if im.set {
				return nil, fmt.Errorf("%w: multiple %s flags not allowed", ErrBadRule, a)
			}
			*im = ifaceMatch{set: true, neg: neg, name: v}
		case "-p", "--protocol":
			v, err := need(i, a)
			if err != nil {
				return nil, err
			}
			i++
			if r.proto != "" {
				return nil, fmt.Errorf("%w: multiple -p flags not allowed", ErrBadRule)
			}
			p, err := normalizeProto(v)
			if err != nil {
				return nil, err
			}
			if p == "all" {
				if neg {
					return nil, fmt.Errorf("%w: rule would never match protocol", ErrBadRule)
				}
				p = ""
			}
			if (p == "icmp" && family == v1.IPv6Protocol) || (p == "ipv6-icmp" && family == v1.IPv4Protocol) {
				return nil, fmt.Errorf("%w: protocol %q is not valid for %s", ErrBadRule, v, family)
			}
			r.proto, r.protoNeg = p, neg
		case "-f", "--fragment":
			if family == v1.IPv6Protocol {
				return nil, fmt.Errorf("%w: -f is IPv4 only (use -m frag)", ErrBadRule)
			}
			if r.fragment != nil {
				return nil, fmt.Errorf("%w: multiple -f flags not allowed", ErrBadRule)
			}
			f := !neg
			r.fragment = &f
		case "-m", "--match":
			v, err := need(i, a)
			if err != nil {
				return nil, err
			}
			i++
			if neg {
				return nil, fmt.Errorf("%w: unexpected ! before -m", ErrBadRule)
			}
			if spec, ok := matchModules[v]; ok && spec.family != "" && spec.family != family {
				return nil, fmt.Errorf("%w: match %q is not available for %s", ErrBadRule, v, family)
			}
			r.matches = append(r.matches, &match{name: v})
		case "-j", "--jump", "-g", "--goto":
			v, err := need(i, a)
			if err != nil {
				return nil, err
			}
			i++
			if neg {
				return nil, fmt.Errorf("%w: cannot negate %s", ErrBadRule, a)
			}
			if r.target != "" {
				return nil, fmt.Errorf("%w: multiple -j/-g flags not allowed", ErrBadRule)
			}
			r.target = v
			r.goTo = a == "-g" || a == "--goto"
			if _, ok := targets[v]; ok && r.goTo {
				return nil, fmt.Errorf("%w: goto target %q is not a chain", ErrBadRule, v)
			}
		case "-c", "--set-counters":
			if i+2 >= len(args) {
				return nil, fmt.Errorf("%w: -c requires packet and byte counters", ErrBadRule)
			}
			i += 2
		default:
			if !strings.HasPrefix(a, "--") {
				return nil, fmt.Errorf("%w: bad argument %q", ErrBadRule, a)
			}
			n, err := r.addOption(table, args, i, neg)
			if err != nil {
				return nil, err
			}
			i += n
		}
		neg = false
	}
	if neg {
		return nil, fmt.Errorf("%w: dangling !", ErrBadRule)
	}
	if err := r.finish(family, table); err != nil {
		return nil, err
	}
	return r, nil
}

// addOption attaches the "--option [values]" at args[i] to the target or
// match that claims it, the way iptables resolves options: the target
// first, then the matches in the order given, then the implicit match of
// the -p protocol, then (generically) the last match if its module is not
// one the fake knows. It returns how many values it consumed.
func (r *rule) addOption(table xtables.Table, args []string, i int, neg bool) (int, error) {
	a := args[i]
	take := func(n int) ([]string, error) {
		if i+n >= len(args) {
			return nil, fmt.Errorf("%w: option %q requires %d argument(s)", ErrBadRule, a, n)
		}
		vals := append([]string(nil), args[i+1:i+1+n]...)
		for _, v := range vals {
			if v == "!" {
				return nil, fmt.Errorf("%w: %q: put ! before the option, not after it", ErrBadRule, a)
			}
		}
		return vals, nil
	}
	if r.target != "" {
		if spec, ok := targets[r.target]; ok {
			if name, n, ok := spec.lookup(a); ok {
				if neg {
					return 0, fmt.Errorf("%w: target option %q cannot be negated", ErrBadRule, a)
				}
				for _, o := range r.targetOpts {
					if o.name == name {
						return 0, fmt.Errorf("%w: %s: option %q given twice", ErrBadRule, r.target, name)
					}
				}
				vals, err := take(n)
				if err != nil {
					return 0, err
				}
				r.targetOpts = append(r.targetOpts, opt{name: name, vals: vals})
				return n, nil
			}
		}
	}
	attach := func(m *match, name string, n int) (int, error) {
		if _, dup := m.get(name); dup {
			return 0, fmt.Errorf("%w: %s match: option %q given twice", ErrBadRule, m.name, name)
		}
		vals, err := take(n)
		if err != nil {
			return 0, err
		}
		m.opts = append(m.opts, opt{name: name, neg: neg, vals: vals})
		return n, nil
	}
	for i := len(r.matches) - 1; i >= 0; i-- {
		m := r.matches[i]
		if name, n, ok := matchModules[m.name].lookup(a); ok {
			return attach(m, name, n)
		}
	}
	// getopt accepts an unambiguous abbreviation of an option of the
	// target or of a loaded match (so "--dport" after "-m multiport" is
	// its "--dports").
	if name, owner, ok := r.abbreviation(a); ok {
		if owner == nil {
			if neg {
				return 0, fmt.Errorf("%w: target option %q cannot be negated", ErrBadRule, a)
			}
			n := targets[r.target].opts[name]
			for _, o := range r.targetOpts {
				if o.name == name {
					return 0, fmt.Errorf("%w: %s: option %q given twice", ErrBadRule, r.target, name)
				}
			}
			vals, err := take(n)
			if err != nil {
				return 0, err
			}
			r.targetOpts = append(r.targetOpts, opt{name: name, vals: vals})
			return n, nil
		}
		return attach(owner, name, matchModules[owner.name].opts[name])
	}
	if r.proto != "" && !r.protoNeg {
		protoModule := r.proto
		if protoModule == "ipv6-icmp" {
			protoModule = "icmp6"
		}
		if name, n, ok := matchModules[protoModule].lookup(a); ok {
			m := &match{name: protoModule, implicit: true}
			r.matches = append(r.matches, m)
			return attach(m, name, n)
		}
	}
	if len(r.matches) > 0 {
		last := r.matches[len(r.matches)-1]
		if _, known := matchModules[last.name]; !known {
			n := 0
			for i+1+n < len(args) && args[i+1+n] != "!" && !strings.HasPrefix(args[i+1+n], "-") {
				n++
			}
			return attach(last, a, n)
		}
	}
	return 0, fmt.Errorf("%w: unknown option %q", ErrBadRule, a)
}

// finish validates the parsed rule, compiles it and computes spec and key.
func (r *rule) finish(family v1.IPFamily, table xtables.Table) error {
	for _, m := range r.matches {
		spec := matchModules[m.name]
		if spec == nil {
			continue
		}
		if spec.proto != "" && (r.proto != spec.proto || r.protoNeg) {
			return fmt.Errorf("%w: %s match needs \"-p %s\"", ErrBadRule, m.name, spec.proto)
		}
		if spec.protos != nil {
			ok := false
			for _, p := range spec.protos {
				ok = ok || (p == r.proto && !r.protoNeg)
			}
			if !ok {
				return fmt.Errorf("%w: %s match needs -p tcp, udp or sctp", ErrBadRule, m.name)
			}
		}
		cm, err := compileMatch(family, r, m)
		if err != nil {
			return fmt.Errorf("%w: %s match: %v", ErrBadRule, m.name, err)
		}
		m.m = cm
	}
	if r.target != "" {
		if spec, ok := targets[r.target]; ok {
			if spec.tables != nil {
				ok := false
				for _, t := range spec.tables {
					ok = ok || t == table
				}
				if !ok {
					return fmt.Errorf("%w: target %s is not valid in table %q", ErrBadRule, r.target, table)
				}
			}
			for _, t := range spec.notIn {
				if t == table {
					return fmt.Errorf("%w: target %s is not valid in table %q", ErrBadRule, r.target, table)
				}
			}
			t, err := compileTarget(family, r)
			if err != nil {
				return fmt.Errorf("%w: %s target: %v", ErrBadRule, r.target, err)
			}
			r.t = t
		} else if err := validateTargetChainName(r.target); err != nil {
			return err
		}
	}
	r.canonicalize(family)
	r.spec = r.render()
	r.key = strings.Join(r.spec, "\x00")
	return nil
}

func validateTargetChainName(name string) error {
	if name == "" || strings.HasPrefix(name, "-") || len(name) > maxChainNameLen {
		return fmt.Errorf("%w: invalid target %q", ErrBadRule, name)
	}
	return nil
}

// render produces the normalized argument list: the fixed header options
// in iptables-save's order (-s, -d, -i, -o, -p, -f; addresses with their
// prefix length), then the matches in the order given (implicit protocol
// matches made explicit, options as written), then the target.
func (r *rule) render() []string {
	var s []string
	negate := func(n bool) {
		if n {
			s = append(s, "!")
		}
	}
	// An address with a /0 mask matches everything: iptables drops it
	// (keeping it only when negated).
	if r.src.set && (r.src.neg || r.src.p.Bits() > 0) {
		negate(r.src.neg)
		s = append(s, "-s", r.src.p.String())
	}
	if r.dst.set && (r.dst.neg || r.dst.p.Bits() > 0) {
		negate(r.dst.neg)
		s = append(s, "-d", r.dst.p.String())
	}
	if r.in.set {
		negate(r.in.neg)
		s = append(s, "-i", r.in.name)
	}
	if r.out.set {
		negate(r.out.neg)
		s = append(s, "-o", r.out.name)
	}
	if r.proto != "" {
		negate(r.protoNeg)
		s = append(s, "-p", r.proto)
	}
	if r.fragment != nil {
		negate(!*r.fragment)
		s = append(s, "-f")
	}
	for _, m := range r.matches {
		s = append(s, "-m", m.name)
		for _, o := range m.opts {
			negate(o.neg)
			s = append(s, o.name)
			s = append(s, o.vals...)
		}
	}
	if r.target != "" {
		if r.goTo {
			s = append(s, "-g", r.target)
		} else {
			s = append(s, "-j", r.target)
		}
		for _, o := range r.targetOpts {
			s = append(s, o.name)
			s = append(s, o.vals...)
		}
	}
	return s
}

// checkHook refuses a target used directly in a built-in chain of a hook
// the kernel does not allow it in (REJECT in PREROUTING, MASQUERADE in
// OUTPUT, ...). In user chains the kernel checks every hook the chain is
// reachable from; the fake leaves that to the Tracer, which reports it on
// any path that gets there.
func checkHook(table xtables.Table, chain xtables.Chain, r *rule) error {
	if isBuiltinChain(table, chain) {
		if r.in.set && (chain == xtables.ChainOutput || chain == xtables.ChainPostrouting) {
			return fmt.Errorf("%w: -i is not valid in chain %s (no input interface there)", ErrBadRule, chain)
		}
		if r.out.set && (chain == xtables.ChainPrerouting || chain == xtables.ChainInput) {
			return fmt.Errorf("%w: -o is not valid in chain %s (no output interface yet)", ErrBadRule, chain)
		}
	}
	spec, ok := targets[r.target]
	if !ok || spec.hooks == nil || !isBuiltinChain(table, chain) {
		return nil
	}
	for _, h := range spec.hooks {
		if h == chain {
			return nil
		}
	}
	return fmt.Errorf("%w: target %s is not valid in chain %s", ErrBadRule, r.target, chain)
}

// abbreviation finds the one option of the target or a loaded match that
// starts with a (getopt's unambiguous abbreviation). owner is nil for a
// target option.
func (r *rule) abbreviation(a string) (name string, owner *match, ok bool) {
	found := 0
	if spec, known := targets[r.target]; known && r.target != "" {
		for o := range spec.opts {
			if strings.HasPrefix(o, a) {
				name, owner = o, nil
				found++
			}
		}
	}
	seen := map[string]bool{}
	for i := len(r.matches) - 1; i >= 0; i-- {
		m := r.matches[i]
		spec := matchModules[m.name]
		if spec == nil || seen[m.name] {
			continue
		}
		seen[m.name] = true
		for o := range spec.opts {
			if strings.HasPrefix(o, a) {
				name, owner = o, m
				found++
			}
		}
	}
	return name, owner, found == 1
}
