//go:build linux

package nftables

import (
	"net/netip"
	"strconv"
)

// ruleSpec is one rule of a chain. The per-service chains' rules are
// typed (an optional numgen step, one match, one statement), planned once
// and rendered from these fields both as nft text (appendText: dry run,
// the nft path, the content hash) and as netlink expressions
// (nlencode.go), never parsed back. The fixed chains' rules, written
// through nft only, are nft text.
//
// The names, texts and address lists a rule may carry are in x (nil when
// it has none): a DNAT rule, ten in a policy chain of ten endpoints and
// about nine in ten of all rules at scale, needs none of them, and is 48
// bytes instead of 112 (the typed rules were the largest garbage of a
// cold start: 11 MB at 10,000 services × 10 endpoints).
type ruleSpec struct {
	numgen uint32 // "numgen random mod numgen 0" first; 0: none
	mark   uint32 // stmtMarkOr
	match  matchKind
	stmt   stmtKind
	v6     bool  // the address family of saddr matches and dnat ("ip6")
	proto  uint8 // dnat's "meta l4proto" (unix.IPPROTO_*)
	bits   uint8 // matchSaddr: the prefix length
	port   uint16
	addr   netip.Addr // dnat's address, matchSaddr's prefix address
	x      *ruleExt
}

// ruleExt is what a rule names or quotes, beside its typed fields.
type ruleExt struct {
	text    string // a fixed chain's rule as nft text; "" for a typed rule
	comment string
	// chain is goto's target; set is the set of matchSaddrSet and
	// stmtUpdate, or matchIifname's interface name (a trailing "*"
	// matches a prefix).
	chain, set string
	// notIn is matchSaddrNotIn's prefixes, then its addresses (written
	// without a length).
	notIn *addrList
}

func (r *ruleSpec) text() string {
	if r.x == nil {
		return ""
	}
	return r.x.text
}

func (r *ruleSpec) comment() string {
	if r.stmt == stmtDNATMap {
		return string(r.appendComment(nil))
	}
	if r.x == nil {
		return ""
	}
	return r.x.comment
}

// appendComment appends r's own comment (comment) to b.
func (r *ruleSpec) appendComment(b []byte) []byte {
	switch {
	case r.stmt == stmtDNATMap:
		return appendSlotComment(b, slotRef{m: r.bits, slot: r.mark >> slotBits})
	case r.x == nil:
		return b
	}
	return append(b, r.x.comment...)
}

func (r *ruleSpec) chain() string {
	if r.x == nil {
		return ""
	}
	return r.x.chain
}

func (r *ruleSpec) set() string {
	if r.x == nil {
		return ""
	}
	return r.x.set
}

func (r *ruleSpec) notIn() *addrList {
	if r.x == nil {
		return nil
	}
	return r.x.notIn
}

// ext is r's names and texts, made on first use (r's own: a rule is
// never copied and then changed).
func (r *ruleSpec) ext() *ruleExt {
	if r.x == nil {
		r.x = &ruleExt{}
	}
	return r.x
}

// textRule is a fixed chain's rule.
func textRule(text, comment string) ruleSpec {
	return ruleSpec{x: &ruleExt{text: text, comment: comment}}
}

type addrList struct {
	prefixes []netip.Prefix
	addrs    []netip.Addr
}

type matchKind uint8

const (
	matchNone       matchKind = iota
	matchSaddrSet             // ip saddr @set
	matchSaddr                // ip saddr addr/bits
	matchIifname              // iifname "set"
	matchFibLocal             // fib saddr type local
	matchSaddrNotIn           // ip saddr != { prefixes, addrs }
)

type stmtKind uint8

const (
	stmtGoto   stmtKind = iota + 1 // goto chain
	stmtDrop                       // drop
	stmtDNAT                       // meta l4proto proto dnat to addr:port
	stmtMarkOr                     // mark set mark or mark
	stmtUpdate                     // update @set { ip saddr }
	// stmtDNATMap: "meta l4proto P dnat ip to numgen random mod numgen
	// offset mark map @service-endpoints-bits" (endpoint_maps.go).
	stmtDNATMap
)

func protoNum(proto string) uint8 {
	p, _ := protoNumber(proto)
	return p
}

// dnatRule: "[numgen random mod numgen 0 ]meta l4proto P dnat to EP".
func dnatRule(numgen int, proto uint8, ep netip.AddrPort) ruleSpec {
	return ruleSpec{numgen: uint32(numgen), stmt: stmtDNAT, proto: proto, v6: ep.Addr().Is6(), addr: ep.Addr(), port: ep.Port()}
}

// gotoRule: "[numgen random mod numgen 0 ]goto chain".
func gotoRule(numgen int, chain string) ruleSpec {
	return ruleSpec{numgen: uint32(numgen), stmt: stmtGoto, x: &ruleExt{chain: chain}}
}

// dnatMapRule: "meta l4proto P dnat ip to numgen random mod n offset K
// map @M", the endpoints under keys K … K+n-1 of map r.m. Its comment
// names the map and slot (slotComment); it is derived from the rule when
// asked (appendComment), not kept: one per service port.
func dnatMapRule(n int, proto uint8, v6 bool, r slotRef) ruleSpec {
	return ruleSpec{numgen: uint32(n), mark: r.offset(), bits: r.m, stmt: stmtDNATMap, proto: proto, v6: v6}
}

func (r *ruleSpec) ipX() string {
	if r.v6 {
		return "ip6"
	}
	return "ip"
}

// appendText appends r as nft writes it.
func (r *ruleSpec) appendText(b []byte) []byte {
	if r.stmt == 0 {
		return append(b, r.text()...)
	}
	if r.numgen > 0 && r.stmt != stmtDNATMap {
		b = append(b, "numgen random mod "...)
		b = strconv.AppendUint(b, uint64(r.numgen), 10)
		b = append(b, " 0 "...)
	}
	switch r.match {
	case matchSaddrSet:
		b = append(append(append(b, r.ipX()...), " saddr @"...), r.set()...)
		b = append(b, ' ')
	case matchSaddr:
		b = append(append(b, r.ipX()...), " saddr "...)
		b = netip.PrefixFrom(r.addr, int(r.bits)).AppendTo(b)
		b = append(b, ' ')
	case matchIifname:
		b = append(append(append(b, `iifname "`...), r.set()...), `" `...)
	case matchFibLocal:
		b = append(b, "fib saddr type local "...)
	case matchSaddrNotIn:
		b = append(append(b, r.ipX()...), " saddr != { "...)
		n := 0
		notIn := r.notIn()
		if notIn == nil {
			notIn = &addrList{}
		}
		for _, p := range notIn.prefixes {
			if n++; n > 1 {
				b = append(b, ", "...)
			}
			b = p.AppendTo(b)
		}
		for _, a := range notIn.addrs {
			if n++; n > 1 {
				b = append(b, ", "...)
			}
			b = a.AppendTo(b)
		}
		b = append(b, " } "...)
	}
	switch r.stmt {
	case stmtGoto:
		b = append(append(b, "goto "...), r.chain()...)
	case stmtDrop:
		b = append(b, "drop"...)
	case stmtDNAT:
		b = append(append(append(b, "meta l4proto "...), protoName(r.proto)...), " dnat to "...)
		if !r.addr.IsValid() {
			b = strconv.AppendUint(append(b, ':'), uint64(r.port), 10)
		} else {
			b = netip.AddrPortFrom(r.addr, r.port).AppendTo(b)
		}
	case stmtDNATMap:
		b = append(append(append(b, "meta l4proto "...), protoName(r.proto)...), " dnat "...)
		b = append(append(b, r.ipX()...), " to numgen random mod "...)
		b = strconv.AppendUint(b, uint64(r.numgen), 10)
		b = strconv.AppendUint(append(b, " offset "...), uint64(r.mark), 10)
		b = append(append(b, " map @"...), endpointMap(r.bits)...)
	case stmtMarkOr:
		b = append(b, "mark set mark or "...)
		b = appendMark(b, r.mark)
	case stmtUpdate:
		b = append(append(append(b, "update @"...), r.set()...), " { "...)
		b = append(append(b, r.ipX()...), " saddr }"...)
	}
	return b
}

// String is the rule's nft text.
func (r *ruleSpec) String() string {
	if r.stmt == 0 {
		return r.text()
	}
	return string(r.appendText(nil))
}

// appendMark writes a mark as upstream does ("%#08x": 0x and at least
// eight hex digits).
func appendMark(b []byte, m uint32) []byte {
	b = append(b, "0x"...)
	s := strconv.FormatUint(uint64(m), 16)
	for i := len(s); i < 8; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}
