package xtblob

import (
	"encoding/binary"
	"math"
	"net/netip"
	"strconv"
)

// extHeader is sizeof(struct xt_entry_match) and sizeof(struct
// xt_entry_target): a 16-bit size, a 29-byte name, a revision.
const extHeader = 32

// extKind names a match or target of the vocabulary.
type extKind uint8

const (
	extComment extKind = iota + 1
	extTCP
	extUDP
	extSCTP
	extConntrack
	extMark
	extAddrtype
	extStatistic
	extRecent
	extSet

	extStandard // the standard target (verdicts and chain jumps)
	extMARK
	extMasquerade
	extDNAT
	extRedirect
	extReject
)

// extSpec is what the header of an extension says and how much data
// follows it, XT_ALIGNed, in the revision iptables-legacy 1.8.9 picks on
// kernels since 4.x (the highest one both know).
type extSpec struct {
	name string
	rev  uint8
	size int
}

func (k extKind) spec(fam Family) extSpec {
	switch k {
	case extComment:
		return extSpec{"comment", 0, 256} // struct xt_comment_info
	case extTCP:
		return extSpec{"tcp", 0, 16} // struct xt_tcp: 12
	case extUDP:
		return extSpec{"udp", 0, 16} // struct xt_udp: 10
	case extSCTP:
		return extSpec{"sctp", 0, 296} // struct xt_sctp_info: 292
	case extConntrack:
		return extSpec{"conntrack", 3, 168} // struct xt_conntrack_mtinfo3: 164
	case extMark:
		return extSpec{"mark", 1, 16} // struct xt_mark_mtinfo1: 12
	case extAddrtype:
		return extSpec{"addrtype", 1, 8} // struct xt_addrtype_info_v1
	case extStatistic:
		return extSpec{"statistic", 0, 24} // struct xt_statistic_info
	case extRecent:
		return extSpec{"recent", 1, 232} // struct xt_recent_mtinfo_v1: 228
	case extSet:
		return extSpec{"set", 4, 48} // struct xt_set_info_match_v4: 48
	case extStandard:
		return extSpec{"", 0, 8} // int verdict
	case extMARK:
		return extSpec{"MARK", 2, 8} // struct xt_mark_tginfo2
	case extMasquerade:
		if fam == IPv6 {
			return extSpec{"MASQUERADE", 0, 40} // struct nf_nat_range
		}
		return extSpec{"MASQUERADE", 0, 24} // struct nf_nat_ipv4_multi_range_compat: 20
	case extDNAT:
		return extSpec{"DNAT", 2, 48} // struct nf_nat_range2: 44
	case extRedirect:
		if fam == IPv6 {
			return extSpec{"REDIRECT", 0, 40}
		}
		return extSpec{"REDIRECT", 0, 24}
	case extReject:
		return extSpec{"REJECT", 0, 8} // struct ipt_reject_info / ip6t_reject_info
	}
	panic("xtblob: unknown extension")
}

// openExt is a match or the target of the entry being built.
type openExt struct {
	kind extKind
	off  int    // offset of its data from the start of the entry
	seen uint64 // options given (bits by option id)
	// done is set on a match once another of the same name is opened:
	// iptables gives later options to the newest instance.
	done bool
}

// open appends the header and the zeroed data of an extension and sets
// the defaults iptables' init functions set.
func (r *rule) open(kind extKind) (*openExt, error) {
	sp := kind.spec(r.fam)
	at := r.grow(extHeader + sp.size)
	r.u16(at, uint16(extHeader+sp.size))
	copy(r.buf[at+2:at+31], sp.name)
	r.buf[at+31] = sp.rev
	d := at + extHeader
	switch kind {
	case extTCP, extUDP:
		r.u16(d+2, 0xffff) // spts = 0:65535
		r.u16(d+6, 0xffff) // dpts = 0:65535
	case extSCTP:
		for i := range 4 { // flag_info[i].chunktype = -1
			r.buf[d+268+3*i] = 0xff
		}
	case extRecent:
		copy(r.buf[d+10:], "DEFAULT")
		for i := 212; i < 228; i++ { // mask: all ones
			r.buf[d+i] = 0xff
		}
	case extMasquerade, extRedirect:
		if r.fam == IPv4 {
			r.u32(d, 1) // rangesize
		}
	case extReject:
		if r.fam == IPv6 {
			r.u32(d, 4) // IP6T_ICMP6_PORT_UNREACH
		} else {
			r.u32(d, 3) // IPT_ICMP_PORT_UNREACHABLE
		}
	}
	x := &r.exts[r.n]
	*x = openExt{kind: kind, off: d - r.base}
	return x, nil
}

func (r *rule) openMatch(e *Encoder, name []byte) error {
	if r.tgt {
		return unsupported("a match after the target")
	}
	if r.n == maxExtensions-1 {
		return unsupported("more than %d matches", maxExtensions-1)
	}
	var kind extKind
	switch str(name) {
	case "comment":
		kind = extComment
	case "tcp":
		kind = extTCP
	case "udp":
		kind = extUDP
	case "sctp":
		kind = extSCTP
	case "conntrack":
		kind = extConntrack
	case "mark":
		kind = extMark
	case "addrtype":
		kind = extAddrtype
	case "statistic":
		kind = extStatistic
	case "recent":
		kind = extRecent
	case "set":
		if e.SetIndex == nil {
			return unsupported("-m set without Encoder.SetIndex")
		}
		kind = extSet
	default:
		return unsupported("match %q", name)
	}
	for i := 0; i < r.n; i++ {
		if r.exts[i].kind == kind {
			r.exts[i].done = true
		}
	}
	if _, err := r.open(kind); err != nil {
		return err
	}
	r.n++
	return nil
}

func (r *rule) openTarget(name []byte, isGoto bool, ref *RuleRef) error {
	if r.tgt {
		return malformed("more than one target")
	}
	var kind extKind
	verdict := int32(0)
	switch str(name) {
	case "ACCEPT":
		kind, verdict = extStandard, VerdictAccept
	case "DROP":
		if r.table == "nat" {
			return malformed("the nat table is not intended for filtering: no DROP")
		}
		kind, verdict = extStandard, VerdictDrop
	case "RETURN":
		kind, verdict = extStandard, VerdictReturn
	case "MARK":
		kind = extMARK
	case "MASQUERADE":
		kind = extMasquerade
	case "DNAT":
		kind = extDNAT
	case "REDIRECT":
		kind = extRedirect
	case "REJECT":
		kind = extReject
	default:
		if err := checkChainName(name); err != nil {
			return err
		}
		kind = extStandard
		ref.Jump = name
		ref.Goto = isGoto
	}
	if isGoto && ref.Jump == nil {
		return unsupported("-g to %q, not a user chain", name)
	}
	x, err := r.open(kind)
	if err != nil {
		return err
	}
	if kind == extStandard {
		r.u32(r.base+x.off, uint32(verdict))
	}
	if isGoto {
		r.buf[r.base+r.lay.flags] |= r.lay.fGoto
	}
	r.tgt = true
	return nil
}

// checkChainName accepts the name of a user chain a rule may jump to:
// not a builtin chain, not the name of an iptables extension (which -j
// would load instead), at most 28 bytes.
func checkChainName(name []byte) error {
	if len(name) == 0 || len(name) > 28 {
		return malformed("bad chain name %q", name)
	}
	if name[0] == '-' || name[0] == '!' {
		return malformed("bad chain name %q", name)
	}
	switch str(name) {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return unsupported("a jump to the builtin chain %s", name)
	}
	if isExtensionName(name) {
		return unsupported("target %q", name)
	}
	return nil
}

// isExtensionName reports whether iptables 1.8.9 ships an extension of
// that name (libxt_, libipt_ or libip6t_), or maps it to a verdict: -j
// with it loads the extension rather than jumping to a chain.
func isExtensionName(name []byte) bool {
	switch str(name) {
	case "AUDIT", "CHECKSUM", "CLASSIFY", "CLUSTERIP", "CONNMARK", "CONNSECMARK", "CT", "DNAT",
		"DNPT", "DSCP", "ECN", "HL", "HMARK", "IDLETIMER", "LED", "LOG", "MARK", "MASQUERADE",
		"NAT", "NETMAP", "NFLOG", "NFQUEUE", "NOTRACK", "RATEEST", "REDIRECT", "REJECT",
		"SECMARK", "SET", "SNAT", "SNPT", "SYNPROXY", "TCPMSS", "TCPOPTSTRIP", "TEE", "TOS",
		"TPROXY", "TRACE", "TTL", "ULOG", "QUEUE", "STANDARD", "ERROR", "MIRROR",
		"802_3", "addrtype", "ah", "among", "arp", "arpreply", "bpf", "cgroup", "cluster",
		"comment", "connbytes", "connlabel", "connlimit", "connmark", "conntrack", "cpu",
		"dccp", "devgroup", "dnat", "dscp", "dst", "ecn", "esp", "eui64", "frag", "hashlimit",
		"hbh", "helper", "hl", "icmp", "icmp6", "ip", "ip6", "ipcomp", "iprange", "ipv6header",
		"ipvs", "length", "limit", "log", "mac", "mangle", "mark", "mark_m", "mh", "multiport",
		"nfacct", "nflog", "osf", "owner", "physdev", "pkttype", "policy", "quota", "rateest",
		"realm", "recent", "redirect", "rpfilter", "rt", "sctp", "set", "snat", "socket", "srh",
		"standard", "state", "statistic", "stp", "string", "tcp", "tcpmss", "time", "tos",
		"ttl", "u32", "udp", "vlan":
		return true
	}
	return false
}

// Option ids, one bit each within an extension (openExt.seen).
const (
	optComment = iota
	optDport
	optSport
	optCtstate
	optMark
	optSrcType
	optDstType
	optLimitIn
	optLimitOut
	optMode
	optProbability
	optSet
	optRcheck
	optUpdate
	optRemove
	optSeconds
	optReap
	optHitcount
	optRttl
	optName
	optRsource
	optRdest
	optMask
	optMatchSet
	optSetXmark
	optSetMark
	optOrMark
	optXorMark
	optAndMark
	optRandom
	optRandomFully
	optPersistent
	optToDestination
	optToPorts
	optRejectWith
)

// optionOf returns the id of option word in extension kind, and whether
// it takes an argument and may be negated; ok is false when kind has no
// such option.
func optionOf(kind extKind, word []byte) (opt int, hasArg, invertible, ok bool) {
	w := str(word)
	switch kind {
	case extComment:
		if w == "--comment" {
			return optComment, true, false, true
		}
	case extTCP, extUDP, extSCTP:
		switch w {
		case "--dport", "--destination-port":
			return optDport, true, true, true
		case "--sport", "--source-port":
			return optSport, true, true, true
		}
	case extConntrack:
		if w == "--ctstate" {
			return optCtstate, true, true, true
		}
	case extMark:
		if w == "--mark" {
			return optMark, true, true, true
		}
	case extAddrtype:
		switch w {
		case "--src-type":
			return optSrcType, true, true, true
		case "--dst-type":
			return optDstType, true, true, true
		case "--limit-iface-in":
			return optLimitIn, false, false, true
		case "--limit-iface-out":
			return optLimitOut, false, false, true
		}
	case extStatistic:
		switch w {
		case "--mode":
			return optMode, true, false, true
		case "--probability":
			return optProbability, true, true, true
		}
	case extRecent:
		switch w {
		case "--set":
			return optSet, false, true, true
		case "--rcheck":
			return optRcheck, false, true, true
		case "--update":
			return optUpdate, false, true, true
		case "--remove":
			return optRemove, false, true, true
		case "--seconds":
			return optSeconds, true, false, true
		case "--reap":
			return optReap, false, false, true
		case "--hitcount":
			return optHitcount, true, false, true
		case "--rttl":
			return optRttl, false, false, true
		case "--name":
			return optName, true, false, true
		case "--rsource":
			return optRsource, false, false, true
		case "--rdest":
			return optRdest, false, false, true
		case "--mask":
			return optMask, true, false, true
		}
	case extSet:
		if w == "--match-set" {
			return optMatchSet, true, true, true
		}
	case extMARK:
		switch w {
		case "--set-xmark":
			return optSetXmark, true, false, true
		case "--set-mark":
			return optSetMark, true, false, true
		case "--or-mark":
			return optOrMark, true, false, true
		case "--xor-mark":
			return optXorMark, true, false, true
		case "--and-mark":
			return optAndMark, true, false, true
		}
	case extMasquerade:
		switch w {
		case "--random":
			return optRandom, false, false, true
		case "--random-fully":
			return optRandomFully, false, false, true
		}
	case extDNAT:
		switch w {
		case "--to-destination":
			return optToDestination, true, false, true
		case "--random":
			return optRandom, false, false, true
		case "--persistent":
			return optPersistent, false, false, true
		}
	case extRedirect:
		switch w {
		case "--to-ports":
			return optToPorts, true, false, true
		case "--random":
			return optRandom, false, false, true
		}
	case extReject:
		if w == "--reject-with" {
			return optRejectWith, true, false, true
		}
	}
	return 0, false, false, false
}

// option applies a long option to the first extension (matches in their
// order, then the target) that has it, as iptables' merged option table
// does, skipping a match that a later one of the same name superseded
// ("-m tcp --dport 1 -m tcp --dport 2" is two tcp matches). An option of no loaded extension loads the match of the rule's
// protocol, as iptables does for "-p tcp --dport 80".
func (r *rule) option(e *Encoder, l *lexer, word []byte, invert bool) error {
	count := r.n
	if r.tgt {
		count++
	}
	for i := 0; i < count; i++ {
		x := &r.exts[i]
		if x.done {
			continue
		}
		opt, hasArg, invertible, ok := optionOf(x.kind, word)
		if !ok {
			continue
		}
		return r.apply(e, l, x, word, opt, hasArg, invertible, invert)
	}
	var implicit extKind
	switch r.proto {
	case protoTCP:
		implicit = extTCP
	case protoUDP:
		implicit = extUDP
	case protoSCTP:
		implicit = extSCTP
	}
	if implicit != 0 && !r.tgt {
		if _, _, _, ok := optionOf(implicit, word); ok {
			for i := 0; i < r.n; i++ {
				if r.exts[i].kind == implicit {
					return unsupported("option %s", word)
				}
			}
			if err := r.openMatch(e, []byte(implicit.spec(r.fam).name)); err != nil {
				return err
			}
			x := &r.exts[r.n-1]
			opt, hasArg, invertible, _ := optionOf(implicit, word)
			return r.apply(e, l, x, word, opt, hasArg, invertible, invert)
		}
	}
	return unsupported("option %s", word)
}

func (r *rule) apply(e *Encoder, l *lexer, x *openExt, word []byte, opt int, hasArg, invertible, invert bool) error {
	if invert && !invertible {
		return malformed("%s cannot be negated", word)
	}
	if x.seen&(1<<opt) != 0 {
		return malformed("%s given twice", word)
	}
	x.seen |= 1 << opt
	var arg []byte
	if hasArg {
		var err error
		if arg, err = r.arg(l, word); err != nil {
			return err
		}
	}
	d := r.base + x.off
	switch x.kind {
	case extComment:
		if len(arg) > 255 {
			return malformed("comment of %d bytes is too long", len(arg))
		}
		copy(r.buf[d:d+256], arg)
	case extTCP, extUDP, extSCTP:
		lo, hi, err := parsePortRange(arg)
		if err != nil {
			return err
		}
		var at, invAt, flagsAt int
		var bit byte
		switch {
		case x.kind == extSCTP && opt == optDport:
			at, invAt, flagsAt, bit = 0, 288, 284, 0x02
		case x.kind == extSCTP:
			at, invAt, flagsAt, bit = 4, 288, 284, 0x01
		case opt == optDport:
			at, bit = 4, 0x02
		default:
			at, bit = 0, 0x01
		}
		switch x.kind {
		case extTCP:
			invAt = 11
		case extUDP:
			invAt = 8
		}
		r.u16(d+at, lo)
		r.u16(d+at+2, hi)
		if flagsAt != 0 {
			r.buf[d+flagsAt] |= bit
		}
		if invert {
			r.buf[d+invAt] |= bit
		}
	case extConntrack:
		var states uint16
		err := forEachItem(arg, func(s []byte) error {
			switch {
			case equalFold(s, "INVALID"):
				states |= 1 << 0
			case equalFold(s, "ESTABLISHED"):
				states |= 1 << 1
			case equalFold(s, "RELATED"):
				states |= 1 << 2
			case equalFold(s, "NEW"):
				states |= 1 << 3
			case equalFold(s, "SNAT"):
				states |= 1 << 6
			case equalFold(s, "DNAT"):
				states |= 1 << 7
			case equalFold(s, "UNTRACKED"):
				states |= 1 << 8
			default:
				return malformed("bad conntrack state %q", s)
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.u16(d+146, r.nu16(d+146)|1) // match_flags |= XT_CONNTRACK_STATE
		if invert {
			r.u16(d+148, r.nu16(d+148)|1)
		}
		r.u16(d+150, states)
	case extMark:
		v, m, err := parseMarkMask(arg)
		if err != nil {
			return err
		}
		r.u32(d, v)
		r.u32(d+4, m)
		if invert {
			r.buf[d+8] = 1
		}
	case extAddrtype:
		switch opt {
		case optLimitIn:
			r.u32(d+4, r.nu32(d+4)|0x4)
			return nil
		case optLimitOut:
			r.u32(d+4, r.nu32(d+4)|0x8)
			return nil
		}
		var types uint16
		err := forEachItem(arg, func(s []byte) error {
			for i, n := range addrTypes {
				if equalFold(s, n) {
					types |= 1 << i
					return nil
				}
			}
			return malformed("bad address type %q", s)
		})
		if err != nil {
			return err
		}
		at, inv := 0, uint32(0x1)
		if opt == optDstType {
			at, inv = 2, 0x2
		}
		r.u16(d+at, types)
		if invert {
			r.u32(d+4, r.nu32(d+4)|inv)
		}
	case extStatistic:
		switch opt {
		case optMode:
			if str(arg) != "random" {
				return unsupported("statistic mode %q", arg)
			}
			r.u16(d, 0) // XT_STATISTIC_MODE_RANDOM
		case optProbability:
			p, err := parseProbability(arg)
			if err != nil {
				return err
			}
			if invert {
				r.u16(d+2, 1) // XT_STATISTIC_INVERT
			}
			r.u32(d+4, p)
			// statistic_check sets u.nth.count = every - packet
			// whatever the mode; in random mode, every overlaps
			// probability and packet is 0.
			r.u32(d+12, p)
		}
	case extRecent:
		return r.recent(d, opt, arg, invert, word)
	case extSet:
		return r.set(e, l, d, arg, invert)
	case extMARK:
		return r.markTarget(x, d, opt, arg)
	case extMasquerade, extRedirect, extDNAT:
		return r.nat(x.kind, d, opt, arg)
	case extReject:
		v, ok := rejectWith(r.fam, arg)
		if !ok {
			return unsupported("--reject-with %q", arg)
		}
		r.u32(d, v)
	}
	return nil
}

func (r *rule) nu16(at int) uint16 { return binary.NativeEndian.Uint16(r.buf[at:]) }
func (r *rule) nu32(at int) uint32 { return binary.NativeEndian.Uint32(r.buf[at:]) }

// addrTypes are the names of xt_addrtype's bits, 1 << RTN_*.
var addrTypes = [...]string{"UNSPEC", "UNICAST", "LOCAL", "BROADCAST", "ANYCAST", "MULTICAST",
	"BLACKHOLE", "UNREACHABLE", "PROHIBIT", "THROW", "NAT", "XRESOLVE"}

// parseMarkMask parses value[/mask] (XTTYPE_MARKMASK32): without a mask,
// all 32 bits.
func parseMarkMask(b []byte) (v, m uint32, err error) {
	m = 0xffffffff
	for i, c := range b {
		if c == '/' {
			mv, ok := parseUint(b[i+1:], math.MaxUint32)
			if !ok {
				return 0, 0, numberError("mask", b[i+1:])
			}
			m = uint32(mv)
			b = b[:i]
			break
		}
	}
	vv, ok := parseUint(b, math.MaxUint32)
	if !ok {
		return 0, 0, numberError("mark", b)
	}
	return uint32(vv), m, nil
}

// parseProbability reads --probability as libxt_statistic does: a double
// in [0, 1], stored as lround(0x80000000 * p).
func parseProbability(b []byte) (uint32, error) {
	for _, c := range b {
		if (c < '0' || c > '9') && c != '.' {
			return 0, unsupported("probability %q is not a plain decimal", b)
		}
	}
	p, err := strconv.ParseFloat(str(b), 64)
	if err != nil || p < 0 || p > 1 {
		return 0, malformed("bad probability %q", b)
	}
	return uint32(math.Round(0x80000000 * p)), nil
}

func (r *rule) recent(d, opt int, arg []byte, invert bool, word []byte) error {
	const (
		check  = 0x01
		set    = 0x02
		update = 0x04
		remove = 0x08
		ttl    = 0x10
		reap   = 0x20
	)
	var bit byte
	switch opt {
	case optSet:
		bit = set
	case optRcheck:
		bit = check
	case optUpdate:
		bit = update
	case optRemove:
		bit = remove
	case optRttl:
		bit = ttl
	case optReap:
		bit = reap
	case optSeconds, optHitcount:
		v, ok := parseUint(arg, math.MaxUint32)
		if !ok {
			return numberError(string(word), arg)
		}
		if opt == optSeconds && v == 0 {
			return malformed("%s must be at least 1", word)
		}
		at := 0
		if opt == optHitcount {
			at = 4
		}
		r.u32(d+at, uint32(v))
	case optName:
		if len(arg) >= 200 || len(arg) == 0 {
			return malformed("bad recent list name %q", arg)
		}
		// strcpy over the default "DEFAULT": a shorter name leaves the
		// rest of it after its NUL, as iptables does.
		copy(r.buf[d+10:], arg)
		r.buf[d+10+len(arg)] = 0
	case optRsource:
		r.buf[d+210] = 0
	case optRdest:
		r.buf[d+210] = 1
	case optMask:
		a, err := parseAddr(r.fam, arg)
		if err != nil {
			return err
		}
		m := r.buf[d+212 : d+228]
		clear(m)
		if r.fam == IPv4 {
			a4 := a.As4()
			copy(m, a4[:])
		} else {
			a16 := a.As16()
			copy(m, a16[:])
		}
	}
	if bit != 0 {
		if bit&(set|check|update|remove) != 0 && r.buf[d+8]&(set|check|update|remove) != 0 {
			return malformed("recent: only one of --set, --rcheck, --update or --remove")
		}
		r.buf[d+8] |= bit
		if invert {
			r.buf[d+9] = 1
		}
	}
	return nil
}

func (r *rule) markTarget(x *openExt, d, opt int, arg []byte) error {
	if x.seen&^(1<<opt) != 0 {
		return malformed("MARK: more than one operation")
	}
	var mark, mask uint32
	switch opt {
	case optSetXmark, optSetMark:
		v, m, err := parseMarkMask(arg)
		if err != nil {
			return err
		}
		mark, mask = v, m
		if opt == optSetMark {
			mask = v | m
		}
	default:
		v, ok := parseUint(arg, math.MaxUint32)
		if !ok {
			return numberError("mark", arg)
		}
		switch opt {
		case optOrMark:
			mark, mask = uint32(v), uint32(v)
		case optXorMark:
			mark, mask = uint32(v), 0
		case optAndMark:
			mark, mask = 0, ^uint32(v)
		}
	}
	r.u32(d, mark)
	r.u32(d+4, mask)
	return nil
}

// NAT range flags (linux/netfilter/nf_nat.h).
const (
	natMapIPs         = 1 << 0
	natProtoSpecified = 1 << 1
	natProtoRandom    = 1 << 2
	natPersistent     = 1 << 3
	natRandomFully    = 1 << 4
)

func (r *rule) nat(kind extKind, d, opt int, arg []byte) error {
	// Where the flags and the port range are: nf_nat_range2 (DNAT) and
	// nf_nat_range (IPv6 MASQUERADE/REDIRECT) start with the flags;
	// IPv4's compat struct with rangesize.
	flagsAt, minPort, maxPort := 0, 36, 38
	if kind != extDNAT && r.fam == IPv4 {
		flagsAt, minPort, maxPort = 4, 16, 18
	}
	var flags uint32
	switch opt {
	case optRandom:
		flags = natProtoRandom
	case optRandomFully:
		flags = natRandomFully
	case optPersistent:
		flags = natPersistent
	case optToPorts:
		lo, hi, err := parseNATPorts(arg)
		if err != nil {
			return err
		}
		r.be16(d+minPort, lo)
		r.be16(d+maxPort, hi)
		flags = natProtoSpecified
	case optToDestination:
		a, port, hasPort, err := parseDestination(r.fam, arg)
		if err != nil {
			return err
		}
		if r.fam == IPv4 {
			a4 := a.As4()
			copy(r.buf[d+4:], a4[:])
			copy(r.buf[d+20:], a4[:])
		} else {
			a16 := a.As16()
			copy(r.buf[d+4:], a16[:])
			copy(r.buf[d+20:], a16[:])
		}
		flags = natMapIPs
		if hasPort {
			r.be16(d+minPort, port)
			r.be16(d+maxPort, port)
			flags |= natProtoSpecified
		}
	}
	r.u32(d+flagsAt, r.nu32(d+flagsAt)|flags)
	return nil
}

// parseNATPorts parses --to-ports N or N-M.
func parseNATPorts(b []byte) (lo, hi uint16, err error) {
	for i, c := range b {
		if c == '-' {
			if lo, err = parsePort(b[:i]); err != nil {
				return 0, 0, err
			}
			if hi, err = parsePort(b[i+1:]); err != nil {
				return 0, 0, err
			}
			if lo > hi {
				return 0, 0, malformed("port range %q is inverted", b)
			}
			return lo, hi, nil
		}
	}
	lo, err = parsePort(b)
	return lo, lo, err
}

// parseDestination parses --to-destination's addr[:port] (IPv6:
// [addr]:port, [addr] or addr); ranges are ErrUnsupported.
func parseDestination(fam Family, b []byte) (a netip.Addr, port uint16, hasPort bool, err error) {
	addr, portPart := b, []byte(nil)
	if fam == IPv6 {
		if len(b) > 0 && b[0] == '[' {
			end := -1
			for i, c := range b {
				if c == ']' {
					end = i
					break
				}
			}
			if end < 0 {
				return a, 0, false, malformed("bad destination %q", b)
			}
			addr = b[1:end]
			rest := b[end+1:]
			if len(rest) > 0 {
				if rest[0] != ':' {
					return a, 0, false, malformed("bad destination %q", b)
				}
				portPart = rest[1:]
				hasPort = true
			}
		}
	} else {
		for i, c := range b {
			if c == ':' {
				addr, portPart, hasPort = b[:i], b[i+1:], true
				break
			}
		}
	}
	for _, c := range addr {
		if c == '-' {
			return a, 0, false, unsupported("address range %q", b)
		}
	}
	if hasPort {
		for _, c := range portPart {
			if c == '-' || c == '/' {
				return a, 0, false, unsupported("port range %q", b)
			}
		}
		if port, err = parsePort(portPart); err != nil {
			return a, 0, false, err
		}
	}
	a, err = parseAddr(fam, addr)
	return a, port, hasPort, err
}

// rejectWith maps a --reject-with name (full name or alias) to its code.
func rejectWith(fam Family, b []byte) (uint32, bool) {
	if fam == IPv6 {
		switch str(b) {
		case "icmp6-no-route", "no-route":
			return 0, true
		case "icmp6-adm-prohibited", "adm-prohibited":
			return 1, true
		case "icmp6-addr-unreachable", "addr-unreach":
			return 3, true
		case "icmp6-port-unreachable", "port-unreach":
			return 4, true
		case "tcp-reset": // ip6tables has no "tcp-rst"
			return 6, true
		case "icmp6-policy-fail", "policy-fail":
			return 7, true
		case "icmp6-reject-route", "reject-route":
			return 8, true
		}
		return 0, false
	}
	switch str(b) {
	case "icmp-net-unreachable", "net-unreach":
		return 0, true
	case "icmp-host-unreachable", "host-unreach":
		return 1, true
	case "icmp-proto-unreachable", "proto-unreach":
		return 2, true
	case "icmp-port-unreachable", "port-unreach":
		return 3, true
	case "icmp-net-prohibited", "net-prohib":
		return 5, true
	case "icmp-host-prohibited", "host-prohib":
		return 6, true
	case "tcp-reset", "tcp-rst":
		return 7, true
	case "icmp-admin-prohibited", "admin-prohib":
		return 8, true
	}
	return 0, false
}

// finish runs the final checks iptables runs on an extension.
func (r *rule) finish(x *openExt) error {
	d := r.base + x.off
	need := func(proto uint16, name string) error {
		if r.proto != proto || r.buf[r.base+r.lay.invflags]&invProto != 0 {
			return malformed("-m %s needs -p %s", name, name)
		}
		return nil
	}
	switch x.kind {
	case extComment:
		if x.seen == 0 {
			return malformed("-m comment needs --comment")
		}
	case extTCP:
		return need(protoTCP, "tcp")
	case extUDP:
		return need(protoUDP, "udp")
	case extSCTP:
		return need(protoSCTP, "sctp")
	case extConntrack:
		if x.seen == 0 {
			return malformed("-m conntrack needs an option")
		}
	case extMark:
		if x.seen == 0 {
			return malformed("-m mark needs --mark")
		}
	case extAddrtype:
		if x.seen&(1<<optSrcType|1<<optDstType) == 0 {
			return malformed("-m addrtype needs --src-type or --dst-type")
		}
		if x.seen&(1<<optLimitIn|1<<optLimitOut) == 1<<optLimitIn|1<<optLimitOut {
			return malformed("-m addrtype: --limit-iface-in and --limit-iface-out exclude each other")
		}
		// The kernel refuses (EINVAL) these types in IPv6 rules:
		// BROADCAST, BLACKHOLE, and PROHIBIT and above.
		if types := r.nu16(d) | r.nu16(d+2); r.fam == IPv6 && (types&(1<<3|1<<6) != 0 || types >= 1<<8) {
			return malformed("-m addrtype: a type IPv6 does not have")
		}
	case extStatistic:
		if x.seen&(1<<optMode) == 0 || x.seen&(1<<optProbability) == 0 {
			return malformed("-m statistic needs --mode random --probability")
		}
	case extRecent:
		if r.buf[d+8]&0x0f == 0 {
			return malformed("-m recent needs --set, --rcheck, --update or --remove")
		}
		if x.seen&(1<<optReap) != 0 && x.seen&(1<<optSeconds) == 0 {
			return malformed("-m recent: --reap needs --seconds")
		}
		// The kernel refuses (EINVAL) --set or --remove with a condition.
		if r.buf[d+8]&(0x02|0x08) != 0 && x.seen&(1<<optSeconds|1<<optHitcount|1<<optRttl|1<<optReap) != 0 {
			return malformed("-m recent: --seconds, --hitcount, --rttl and --reap go with --rcheck or --update")
		}
	case extSet:
		if x.seen == 0 {
			return malformed("-m set needs --match-set")
		}
	case extMARK:
		if x.seen == 0 {
			return malformed("-j MARK needs an operation")
		}
	case extDNAT:
		if x.seen&(1<<optToDestination) == 0 {
			return malformed("-j DNAT needs --to-destination")
		}
		fallthrough
	case extRedirect:
		if x.seen&(1<<optToDestination|1<<optToPorts) != 0 {
			flagsAt := 0
			if x.kind == extRedirect && r.fam == IPv4 {
				flagsAt = 4
			}
			if r.nu32(d+flagsAt)&natProtoSpecified != 0 &&
				r.proto != protoTCP && r.proto != protoUDP && r.proto != protoSCTP {
				return malformed("a port in -j %s needs -p tcp, udp or sctp", x.kind.spec(r.fam).name)
			}
		}
	}
	return nil
}

// set encodes "--match-set NAME DIR[,DIR...]" (libxt_set revision 4:
// struct xt_set_info_match_v4), the set's index from Encoder.SetIndex.
func (r *rule) set(e *Encoder, l *lexer, d int, name []byte, invert bool) error {
	dirs, err := r.arg(l, []byte("--match-set"))
	if err != nil {
		return err
	}
	if len(name) == 0 || len(name) >= 32 {
		return malformed("bad set name %q", name)
	}
	index, ok := e.SetIndex(name)
	if !ok {
		return unsupported("set %q is not known", name)
	}
	r.u16(d, index)
	var dim, flags byte
	if invert {
		flags |= 1 // IPSET_INV_MATCH
	}
	err = forEachItem(dirs, func(dir []byte) error {
		if dim == 6 { // IPSET_DIM_MAX
			return malformed("too many set directions in %q", dirs)
		}
		dim++
		switch str(dir) {
		case "src":
			flags |= 1 << dim
		case "dst":
		default:
			return malformed("bad set direction %q", dir)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.buf[d+2] = dim
	r.buf[d+3] = flags
	return nil
}
