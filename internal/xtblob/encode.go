package xtblob

import (
	"encoding/binary"
	"errors"
	"slices"
)

// Family is the IP family of a table: IPv4 (iptables) or IPv6 (ip6tables).
type Family uint8

// The families.
const (
	IPv4 Family = iota
	IPv6
)

// ErrUnsupported is wrapped by the errors for input this package does not
// encode (a match, target or option outside the engines' vocabulary). The
// caller should run the iptables tool instead; nothing has been written.
var ErrUnsupported = errors.New("xtblob: not supported in process")

// RuleRef says where a rule encoded by Encoder.AppendRule jumps.
type RuleRef struct {
	// Jump is the chain named by the rule's -j (or -g, see Goto) when it
	// is a user-defined chain, aliasing the rule text; nil for any other
	// target. The table writer patches its verdict (at VerdictAt) with
	// the chain's offset.
	Jump []byte
	// Goto is set for -g.
	Goto bool
	// Fallthrough is set for a rule without -j or -g (a comment-only
	// rule, counting packets): libiptc gives its standard target the
	// offset of the entry that follows it as verdict, which the table
	// writer patches at VerdictAt like a jump's.
	Fallthrough bool
	// VerdictAt is the offset, in the buffer AppendRule returned, of the
	// standard target's 32-bit verdict; -1 when the target is not the
	// standard one (DNAT, MARK, ...).
	VerdictAt int
}

// Encoder encodes rules of one family. It keeps scratch space between
// calls, so it is not safe for concurrent use; use one per goroutine.
type Encoder struct {
	// SetIndex, when set, returns the kernel's index of the ipset named
	// name (which -m set --match-set stores in the rule instead of the
	// name); ok false makes the rule ErrUnsupported. Without it, -m set
	// is ErrUnsupported.
	SetIndex func(name []byte) (index uint16, ok bool)
	// Table is the table the rules go to, for iptables' checks that
	// depend on it (-j DROP is refused in "nat"). Empty: no such check.
	Table string

	fam Family
	lay *layout
}

// NewEncoder returns an Encoder for fam.
func NewEncoder(fam Family) *Encoder {
	e := &Encoder{fam: fam, lay: &layout4}
	if fam == IPv6 {
		e.lay = &layout6
	}
	return e
}

// The builtin verdicts of the standard target (linux/netfilter.h and
// x_tables.h): -NF_ACCEPT-1, -NF_DROP-1, XT_RETURN (-NF_REPEAT-1).
const (
	VerdictAccept int32 = -2
	VerdictDrop   int32 = -1
	VerdictReturn int32 = -5
)

// layout is where the fields of struct ipt_entry / ip6t_entry are
// (linux/netfilter_ipv4/ip_tables.h, netfilter_ipv6/ip6_tables.h).
type layout struct {
	size                     int // sizeof the entry without matches
	addrLen                  int
	src, dst, smsk, dmsk     int
	iniface, outiface        int
	inmask, outmask          int
	proto, flags, invflags   int
	targetOffset, nextOffset int
	fGoto, fProto            byte // IPT_F_GOTO / IP6T_F_GOTO; IP6T_F_PROTO
	family                   Family
}

var (
	layout4 = layout{size: 112, addrLen: 4, src: 0, dst: 4, smsk: 8, dmsk: 12,
		iniface: 16, outiface: 32, inmask: 48, outmask: 64,
		proto: 80, flags: 82, invflags: 83, targetOffset: 88, nextOffset: 90,
		fGoto: 0x02, family: IPv4}
	layout6 = layout{size: 168, addrLen: 16, src: 0, dst: 16, smsk: 32, dmsk: 48,
		iniface: 64, outiface: 80, inmask: 96, outmask: 112,
		proto: 128, flags: 131, invflags: 132, targetOffset: 140, nextOffset: 142,
		fGoto: 0x04, fProto: 0x01, family: IPv6}
)

// The inversion flags of the entry's ip part (the same in both families).
const (
	invViaIn  = 0x01
	invViaOut = 0x02
	invSrc    = 0x08
	invDst    = 0x10
	invProto  = 0x40
)

// Protocol numbers.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// maxExtensions bounds the matches of one rule (iptables has no limit;
// the engines write at most five).
const maxExtensions = 12

// rule is the state of one AppendRule call.
type rule struct {
	fam   Family
	lay   *layout
	buf   []byte // dst with the entry being built appended
	base  int    // offset of the entry in buf
	exts  [maxExtensions]openExt
	n     int  // matches opened, then the target (if any) at exts[n]
	tgt   bool // a target was given
	seen  uint16
	proto uint16
	table string
}

// Options of the entry itself, for "given twice" checks.
const (
	seenSrc = 1 << iota
	seenDst
	seenProto
	seenIn
	seenOut
	seenJump
)

// AppendRule appends to dst the entry iptables-legacy builds for rule, the
// arguments of an iptables-restore rule line after "-A CHAIN " (for
// example `-d 10.96.0.10/32 -p tcp -m comment --comment "ns/svc:http" -m
// tcp --dport 80 -j KUBE-SVC-…`), with next_offset and target_offset set
// and counters and comefrom zero, and reports its jump. An argument
// outside the vocabulary yields an error wrapping ErrUnsupported, a
// malformed one (a bad address or port) another error; dst is then
// returned unchanged.
//
// The vocabulary is what svcproxy's engines write: -s, -d, -p
// (tcp|udp|sctp), -i, -o (each may be negated with "!"); the matches
// comment, tcp, udp, sctp (ports and port ranges), conntrack (--ctstate),
// mark, addrtype, statistic (random mode), recent and set (when
// Encoder.SetIndex is given, for example KernelSetIndex); the targets
// ACCEPT, DROP, RETURN, a jump or goto to a user chain, MARK, MASQUERADE,
// DNAT, REDIRECT and REJECT, each in the revision iptables-legacy 1.8.9
// uses on current kernels; a rule without -j falls through (see
// RuleRef.Fallthrough). Where iptables reads an argument more laxly than
// this encoder (inet_aton addresses such as "10.1", numbers with a sign,
// service names, abbreviated options), the error is ErrUnsupported so that
// the tool decides. TestEncodeMatchesKernel and
// TestEncodeRandomMatchesKernel compare the bytes with what
// iptables-legacy-restore gives the kernel.
func (e *Encoder) AppendRule(dst []byte, text []byte) ([]byte, RuleRef, error) {
	orig := len(dst)
	r := rule{fam: e.fam, lay: e.lay, buf: dst, base: orig, table: e.Table}
	r.grow(e.lay.size)
	ref, err := r.parse(e, text)
	if err != nil {
		return dst[:orig], RuleRef{VerdictAt: -1}, err
	}
	return r.buf, ref, nil
}

// grow appends n zero bytes to the entry.
func (r *rule) grow(n int) int {
	at := len(r.buf)
	r.buf = slices.Grow(r.buf, n)[:at+n]
	clear(r.buf[at:])
	return at
}

func (r *rule) u16(at int, v uint16)  { binary.NativeEndian.PutUint16(r.buf[at:], v) }
func (r *rule) u32(at int, v uint32)  { binary.NativeEndian.PutUint32(r.buf[at:], v) }
func (r *rule) be16(at int, v uint16) { binary.BigEndian.PutUint16(r.buf[at:], v) }

func (r *rule) parse(e *Encoder, text []byte) (RuleRef, error) {
	ref := RuleRef{VerdictAt: -1}
	l := lexer{s: text}
	lay := r.lay
	invert := false
	for {
		word, _, ok, err := l.next()
		if err != nil {
			return ref, err
		}
		if !ok {
			break
		}
		if len(word) == 1 && word[0] == '!' {
			if invert {
				return ref, malformed("\"!\" given twice")
			}
			invert = true
			continue
		}
		if len(word) < 2 || word[0] != '-' {
			return ref, malformed("unexpected argument %q", word)
		}
		// Options of the entry itself.
		var seen uint16
		switch str(word) {
		case "-s", "--source", "-d", "--destination":
			dstAddr := str(word) == "-d" || str(word) == "--destination"
			seen = seenSrc
			if dstAddr {
				seen = seenDst
			}
			arg, err := r.arg(&l, word)
			if err != nil {
				return ref, err
			}
			a, plen, err := parsePrefix(r.fam, arg)
			if err != nil {
				return ref, err
			}
			at, mask, inv := lay.src, lay.smsk, byte(invSrc)
			if dstAddr {
				at, mask, inv = lay.dst, lay.dmsk, invDst
			}
			b := r.base
			putAddr(r.buf[b+at:b+at+lay.addrLen], r.buf[b+mask:b+mask+lay.addrLen], a, plen)
			if invert {
				r.buf[b+lay.invflags] |= inv
			}
		case "-p", "--protocol":
			seen = seenProto
			arg, err := r.arg(&l, word)
			if err != nil {
				return ref, err
			}
			switch str(arg) {
			case "tcp":
				r.proto = protoTCP
			case "udp":
				r.proto = protoUDP
			case "sctp":
				r.proto = protoSCTP
			default:
				return ref, unsupported("protocol %q", arg)
			}
			r.u16(r.base+lay.proto, r.proto)
			r.buf[r.base+lay.flags] |= lay.fProto
			if invert {
				r.buf[r.base+lay.invflags] |= invProto
			}
		case "-i", "--in-interface", "-o", "--out-interface":
			out := str(word) == "-o" || str(word) == "--out-interface"
			seen = seenIn
			at, mask, inv := lay.iniface, lay.inmask, byte(invViaIn)
			if out {
				seen = seenOut
				at, mask, inv = lay.outiface, lay.outmask, invViaOut
			}
			arg, err := r.arg(&l, word)
			if err != nil {
				return ref, err
			}
			if err := r.iface(at, mask, arg); err != nil {
				return ref, err
			}
			if invert {
				r.buf[r.base+lay.invflags] |= inv
			}
		case "-m", "--match":
			if invert {
				return ref, malformed("\"!\" before -m")
			}
			arg, err := r.arg(&l, word)
			if err != nil {
				return ref, err
			}
			if err := r.openMatch(e, arg); err != nil {
				return ref, err
			}
			continue
		case "-j", "--jump", "-g", "--goto":
			seen = seenJump
			if invert {
				return ref, malformed("\"!\" before %s", word)
			}
			arg, err := r.arg(&l, word)
			if err != nil {
				return ref, err
			}
			isGoto := str(word) == "-g" || str(word) == "--goto"
			if err := r.openTarget(arg, isGoto, &ref); err != nil {
				return ref, err
			}
		default:
			if word[1] != '-' {
				return ref, unsupported("option %q", word)
			}
			if err := r.option(e, &l, word, invert); err != nil {
				return ref, err
			}
			invert = false
			continue
		}
		if r.seen&seen != 0 {
			return ref, malformed("%s given twice", word)
		}
		r.seen |= seen
		invert = false
	}
	if invert {
		return ref, malformed("\"!\" at the end of the rule")
	}
	// The final checks of the extensions, in order.
	for i := 0; i < r.n; i++ {
		if err := r.finish(&r.exts[i]); err != nil {
			return ref, err
		}
	}
	if !r.tgt {
		if _, err := r.open(extStandard); err != nil {
			return ref, err
		}
		r.tgt = true
		ref.Fallthrough = true
	}
	t := &r.exts[r.n]
	if err := r.finish(t); err != nil {
		return ref, err
	}
	if t.kind == extStandard {
		ref.VerdictAt = r.base + t.off
	} else {
		ref.Jump, ref.Goto = nil, false
	}
	b := r.base
	r.u16(b+lay.targetOffset, uint16(t.off-extHeader))
	size := len(r.buf) - b
	if size > 0xffff {
		return ref, malformed("entry of %d bytes is too large", size)
	}
	r.u16(b+lay.nextOffset, uint16(size))
	return ref, nil
}

// arg returns the argument of option opt.
func (r *rule) arg(l *lexer, opt []byte) ([]byte, error) {
	word, _, ok, err := l.next()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, malformed("option %s needs an argument", opt)
	}
	return word, nil
}

// iface writes an interface name and its mask as
// xtables_parse_interface does: a trailing "+" matches any suffix.
func (r *rule) iface(at, mask int, name []byte) error {
	const ifnamsiz = 16
	if len(name) >= ifnamsiz {
		return malformed("interface name %q is too long", name)
	}
	for _, c := range name {
		if c == '/' || c == ' ' {
			return malformed("interface name %q has a weird character", name)
		}
	}
	b := r.base
	copy(r.buf[b+at:b+at+ifnamsiz], name)
	n := len(name) + 1
	if len(name) == 0 {
		n = 0
	} else if name[len(name)-1] == '+' {
		n = len(name) - 1
	}
	for i := 0; i < n; i++ {
		r.buf[b+mask+i] = 0xff
	}
	return nil
}
