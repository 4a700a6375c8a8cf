//go:build linux

package nftables

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The netlink encoder turns a change set (a partial sync's, or one chunk
// of a full sync's) into the nftables netlink messages nft would send for
// the same transaction, so that the transaction needs no nft process:
// nft (1.0.6) reads back every chain,
// set and map of the table before any transaction that adds a rule, which
// costs O(table) however small the change.
//
// It knows exactly the objects services need: regular chains (add,
// flush, delete), affinity sets, elements of the engine's sets and maps,
// and the rule forms the planner emits for per-service chains, each
// encoded into the expressions nft 1.0.6 generates for its text (the
// implicit "meta l4proto" before a port match, byte-aligned prefixes
// loaded short, others masked, a one-element set turned into a plain
// match, a set of several prefixes into an anonymous interval set). Anything
// else (a base chain, the table, prefixes nft would merge, a rule form it
// does not parse) makes the whole change set go through nft as before:
// errNotEncodable.

var errNotEncodable = errors.New("not encodable over netlink")

// nlEncoder builds the messages of one batch.
type nlEncoder struct {
	family byte // unix.NFPROTO_IPV4 or NFPROTO_IPV6
	table  string
	msgs   []netlink.Message
	setID  uint32
	w      attrWriter // scratch: the message being built
	arena  []byte     // where finished messages are kept
}

func newNLEncoder(family byte) *nlEncoder {
	return &nlEncoder{family: family, table: TableName}
}

func (e *nlEncoder) ipLen() int {
	if e.family == unix.NFPROTO_IPV6 {
		return 16
	}
	return 4
}

// encodedBatch is a change set's netlink encoding (or why it has none).
type encodedBatch struct {
	msgs []netlink.Message
	err  error
}

// encoded returns cs's netlink messages: the encoding startEncode began,
// else one made now.
func (cs *changeSet) encoded(family byte) ([]netlink.Message, error) {
	if cs.encoding != nil {
		b := <-cs.encoding
		cs.encoding = nil
		return b.msgs, b.err
	}
	return encodeChangeSet(family, cs)
}

// encodeChangeSet renders cs as render does, in the same order, into
// netlink messages; errNotEncodable when some object has a form the
// encoder does not know.
func encodeChangeSet(family byte, cs *changeSet) ([]netlink.Message, error) {
	if cs.declare != nil || !cs.localhost.empty() {
		return nil, errNotEncodable
	}
	e := newNLEncoder(family)
	for _, n := range cs.deletes {
		e.chainMsg(unix.NFT_MSG_DELCHAIN, 0, n)
	}
	if err := e.elements(unix.NFT_MSG_DELSETELEM, cs.elemDels, false); err != nil {
		return nil, err
	}
	for _, n := range cs.flushes {
		e.flushChain(n)
	}
	for _, w := range cs.writes {
		if w.spec.base != nil {
			return nil, errNotEncodable
		}
		e.chainMsg(unix.NFT_MSG_NEWCHAIN, netlink.Create, w.spec.name)
		if w.existed {
			e.flushChain(w.spec.name)
		}
	}
	for _, n := range cs.setDels {
		e.add(unix.NFT_MSG_DELSET, 0, func(ae *attrWriter) {
			ae.String(unix.NFTA_SET_TABLE, e.table)
			ae.String(unix.NFTA_SET_NAME, n)
		})
	}
	for _, s := range cs.setAdds {
		if err := e.affinitySet(s); err != nil {
			return nil, err
		}
	}
	for _, w := range cs.writes {
		for i, r := range w.spec.rules {
			exprs, err := e.rule(r.text)
			if err != nil {
				return nil, err
			}
			c := ruleComment(w.spec, i)
			if len(c) > maxComment {
				return nil, errNotEncodable
			}
			e.addRule(w.spec.name, exprs, c)
		}
	}
	if err := e.elements(unix.NFT_MSG_NEWSETELEM, cs.elemAdds, true); err != nil {
		return nil, err
	}
	return e.msgs, nil
}

func (e *nlEncoder) add(msgType uint16, flags netlink.HeaderFlags, attrs func(*attrWriter)) {
	w := &e.w
	w.b = append(w.b[:0], e.family, unix.NFNETLINK_V0, 0, 0)
	attrs(w)
	e.msgs = append(e.msgs, netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | int(msgType)),
			Flags: netlink.Request | flags,
		},
		Data: e.keep(w.b),
	})
}

// keep copies a finished message into the batch's arena: the messages of
// a batch share a few large buffers instead of one allocation each (plus
// the copies an attribute encoder makes), and the scratch buffer they are
// built in is reused from message to message.
func (e *nlEncoder) keep(b []byte) []byte {
	if cap(e.arena)-len(e.arena) < len(b) {
		e.arena = make([]byte, 0, max(len(b), arenaSize))
	}
	off := len(e.arena)
	e.arena = append(e.arena, b...)
	return e.arena[off:len(e.arena):len(e.arena)]
}

const arenaSize = 256 << 10

// attrWriter appends netlink attributes (netfilter's integers big endian,
// each attribute padded to four bytes) to a buffer, as
// netlink.AttributeEncoder encodes them, without its per-attribute
// allocations.
type attrWriter struct{ b []byte }

// begin starts an attribute of type typ; end sets its length (the
// unpadded size, as the kernel and netlink.AttributeEncoder write it) and
// pads it.
func (w *attrWriter) begin(typ uint16) int {
	start := len(w.b)
	w.b = append(w.b, 0, 0, 0, 0)
	binary.NativeEndian.PutUint16(w.b[start+2:], typ)
	return start
}

func (w *attrWriter) end(start int) {
	binary.NativeEndian.PutUint16(w.b[start:], uint16(len(w.b)-start))
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
}

func (w *attrWriter) Bytes(typ uint16, v []byte) {
	s := w.begin(typ)
	w.b = append(w.b, v...)
	w.end(s)
}

// String writes s NUL-terminated.
func (w *attrWriter) String(typ uint16, v string) {
	s := w.begin(typ)
	w.b = append(w.b, v...)
	w.b = append(w.b, 0)
	w.end(s)
}

func (w *attrWriter) Uint32(typ uint16, v uint32) {
	s := w.begin(typ)
	w.b = binary.BigEndian.AppendUint32(w.b, v)
	w.end(s)
}

func (w *attrWriter) Uint64(typ uint16, v uint64) {
	s := w.begin(typ)
	w.b = binary.BigEndian.AppendUint64(w.b, v)
	w.end(s)
}

// Nested writes the attributes fn writes inside one of type typ, flagged
// nested.
func (w *attrWriter) Nested(typ uint16, fn func(*attrWriter) error) {
	s := w.begin(typ | unix.NLA_F_NESTED)
	_ = fn(w)
	w.end(s)
}

func (e *nlEncoder) chainMsg(msgType uint16, flags netlink.HeaderFlags, name string) {
	e.add(msgType, flags, func(ae *attrWriter) {
		ae.String(unix.NFTA_CHAIN_TABLE, e.table)
		ae.String(unix.NFTA_CHAIN_NAME, name)
	})
}

// flushChain deletes every rule of the chain (nft's "flush chain").
func (e *nlEncoder) flushChain(name string) {
	e.add(unix.NFT_MSG_DELRULE, 0, func(ae *attrWriter) {
		ae.String(unix.NFTA_RULE_TABLE, e.table)
		ae.String(unix.NFTA_RULE_CHAIN, name)
	})
}

// affinitySet adds a dynamic set of addresses with a timeout, as nft's
// "add set … { type ipv4_addr ; flags dynamic,timeout ; timeout Ns ; }".
func (e *nlEncoder) affinitySet(s setSpec) error {
	keyType, keyLen := uint32(7), uint32(4) // ipv4_addr
	switch {
	case s.typ == "ipv6_addr":
		keyType, keyLen = 8, 16
	case s.typ != "ipv4_addr":
		return errNotEncodable
	}
	if s.timeout <= 0 {
		return errNotEncodable
	}
	e.setID++
	id := e.setID
	e.add(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *attrWriter) {
		ae.String(unix.NFTA_SET_TABLE, e.table)
		ae.String(unix.NFTA_SET_NAME, s.name)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_TIMEOUT|unix.NFT_SET_EVAL)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, keyType)
		ae.Uint32(unix.NFTA_SET_KEY_LEN, keyLen)
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Uint64(unix.NFTA_SET_TIMEOUT, uint64(s.timeout.Milliseconds()))
		// NFTNL_UDATA_SET_KEYBYTEORDER: big endian (host-order u32 2).
		ud := []byte{0, 4, 0, 0, 0, 0}
		binary.NativeEndian.PutUint32(ud[2:], 2)
		ae.Bytes(unix.NFTA_SET_USERDATA, ud)
	})
	return nil
}

// maxComment is the longest comment a one-byte TLV length holds with its
// NUL; longer ones go through nft (which refuses them).
const maxComment = 254

// userdataComment is a comment TLV (type 0 for rules and set elements
// alike), NUL-terminated as nft writes it.
func userdataComment(c string) []byte { return appendUserdataComment(nil, c) }

func appendUserdataComment(b []byte, c string) []byte {
	b = append(b, 0, byte(len(c)+1))
	b = append(b, c...)
	return append(b, 0)
}

func (e *nlEncoder) addRule(chain string, exprs []expr.Any, comment string) {
	e.add(unix.NFT_MSG_NEWRULE, netlink.Create|netlink.Append, func(ae *attrWriter) {
		ae.String(unix.NFTA_RULE_TABLE, e.table)
		ae.String(unix.NFTA_RULE_CHAIN, chain)
		ae.Nested(unix.NFTA_RULE_EXPRESSIONS, func(ae *attrWriter) error {
			for _, x := range exprs {
				b, err := expr.Marshal(e.family, x)
				if err != nil {
					panic(err) // the encoder builds only well-formed expressions
				}
				ae.Nested(unix.NFTA_LIST_ELEM, func(ae *attrWriter) error {
					ae.b = append(ae.b, b...)
					return nil
				})
			}
			return nil
		})
		if comment != "" {
			s := ae.begin(unix.NFTA_RULE_USERDATA)
			ae.b = appendUserdataComment(ae.b, comment)
			ae.end(s)
		}
	})
}

// nlattr encodes one netlink attribute (4-byte aligned).
func nlattr(typ uint16, data []byte) []byte {
	n := 4 + len(data)
	b := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], data)
	return b
}

// elements adds or deletes elements, one message per run of elements of
// the same container (nft groups them the same way).
func (e *nlEncoder) elements(msgType uint16, elems []elemSpec, add bool) error {
	for i := 0; i < len(elems); {
		j := i
		for ; j < len(elems) && elems[j].container == elems[i].container; j++ {
			if err := e.checkElement(elems[j], add); err != nil {
				return err
			}
		}
		name := elems[i].container
		flags := netlink.HeaderFlags(0)
		if add {
			flags = netlink.Create
		}
		run := elems[i:j]
		e.add(msgType, flags, func(ae *attrWriter) {
			ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, e.table)
			ae.String(unix.NFTA_SET_ELEM_LIST_SET, name)
			ae.Nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(ae *attrWriter) error {
				for _, el := range run {
					ae.Nested(unix.NFTA_LIST_ELEM, func(ae *attrWriter) error {
						e.element(ae, el, add)
						return nil
					})
				}
				return nil
			})
		})
		i = j
	}
	return nil
}

// checkElement reports an element element cannot encode, before any of
// its run is written.
func (e *nlEncoder) checkElement(el elemSpec, add bool) error {
	if _, err := e.elementKey(el.key); err != nil {
		return err
	}
	if !add {
		return nil
	}
	if !containerIsSet(el.container) {
		if _, ok := parseVerdict(strings.Fields(el.value)); !ok {
			return errNotEncodable
		}
	}
	if len(el.comment) > maxComment {
		return errNotEncodable
	}
	return nil
}

// element writes one element checkElement accepted.
func (e *nlEncoder) element(ae *attrWriter, el elemSpec, add bool) {
	key, _ := e.elementKey(el.key)
	ae.Nested(unix.NFTA_SET_ELEM_KEY, func(ae *attrWriter) error {
		ae.Bytes(unix.NFTA_DATA_VALUE, key)
		return nil
	})
	if !add {
		return
	}
	if !containerIsSet(el.container) {
		v, _ := verdictData(el.value)
		ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_DATA, v)
	}
	if el.comment != "" {
		s := ae.begin(unix.NFTA_SET_ELEM_USERDATA)
		ae.b = appendUserdataComment(ae.b, el.comment)
		ae.end(s)
	}
}

// elementKey encodes a (concatenated) key of the engine's containers:
// addresses, protocols (one byte) and ports (two, big endian), each field
// padded to four bytes.
func (e *nlEncoder) elementKey(text string) ([]byte, error) {
	var key []byte
	for _, f := range strings.Split(text, " . ") {
		if a, err := netip.ParseAddr(f); err == nil {
			if a.Is4() != (e.ipLen() == 4) || a.Zone() != "" {
				return nil, errNotEncodable
			}
			key = append(key, a.AsSlice()...)
			continue
		}
		if p, ok := protoNumber(f); ok {
			key = append(key, p, 0, 0, 0)
			continue
		}
		port, err := strconv.ParseUint(f, 10, 16)
		if err != nil {
			return nil, errNotEncodable
		}
		key = append(key, byte(port>>8), byte(port), 0, 0)
	}
	return key, nil
}

func protoNumber(s string) (byte, bool) {
	switch s {
	case "tcp":
		return unix.IPPROTO_TCP, true
	case "udp":
		return unix.IPPROTO_UDP, true
	case "sctp":
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// verdictData is NFTA_SET_ELEM_DATA's content for "goto C", "jump C",
// "drop", "accept" or "return".
func verdictData(text string) ([]byte, error) {
	v, ok := parseVerdict(strings.Fields(text))
	if !ok {
		return nil, errNotEncodable
	}
	code := make([]byte, 4)
	binary.BigEndian.PutUint32(code, uint32(int32(v.Kind)))
	inner := nlattr(unix.NFTA_VERDICT_CODE, code)
	if v.Chain != "" {
		inner = append(inner, nlattr(unix.NFTA_VERDICT_CHAIN, append([]byte(v.Chain), 0))...)
	}
	return nlattr(unix.NLA_F_NESTED|unix.NFTA_DATA_VERDICT, inner), nil
}

func parseVerdict(f []string) (*expr.Verdict, bool) {
	switch {
	case len(f) == 2 && f[0] == "goto":
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: f[1]}, true
	case len(f) == 2 && f[0] == "jump":
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: f[1]}, true
	case len(f) == 1 && f[0] == "drop":
		return &expr.Verdict{Kind: expr.VerdictDrop}, true
	case len(f) == 1 && f[0] == "accept":
		return &expr.Verdict{Kind: expr.VerdictAccept}, true
	case len(f) == 1 && f[0] == "return":
		return &expr.Verdict{Kind: expr.VerdictReturn}, true
	}
	return nil, false
}

// Registers as nft allocates them: the verdict register and the first
// 16-byte data registers.
const (
	regVerdict = 0
	reg1       = 1
	reg2       = 2
)

// rule parses one rule of the planner's forms (matches, then one final
// statement) into the expressions nft generates for it.
func (e *nlEncoder) rule(text string) ([]expr.Any, error) {
	f := strings.Fields(text)
	var out []expr.Any
	for len(f) > 0 {
		// Final statements.
		if v, ok := parseVerdict(f); ok {
			return append(out, v), nil
		}
		switch {
		case f[0] == "dnat" && len(f) == 3 && f[1] == "to":
			x, err := e.dnat(f[2])
			if err != nil {
				return nil, err
			}
			return append(out, x...), nil
		case f[0] == "mark" && len(f) == 5 && f[1] == "set" && f[2] == "mark" && f[3] == "or":
			// "mark set mark or M": load, (mark & ^M) ^ M, store; the
			// mark is a host-order 32-bit value.
			m, err := strconv.ParseUint(f[4], 0, 32)
			if err != nil {
				return nil, errNotEncodable
			}
			mask := binary.NativeEndian.AppendUint32(nil, ^uint32(m))
			xor := binary.NativeEndian.AppendUint32(nil, uint32(m))
			return append(out,
				&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: mask, Xor: xor},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1}), nil
		case f[0] == "update" && len(f) == 6 && strings.HasPrefix(f[1], "@") && f[2] == "{" && f[5] == "}":
			load, ok := e.addrLoad(f[3], f[4])
			if !ok {
				return nil, errNotEncodable
			}
			return append(out, load, &expr.Dynset{SrcRegKey: reg1, SetName: f[1][1:], Operation: uint32(unix.NFT_DYNSET_OP_UPDATE)}), nil
		}
		// Matches.
		var m []expr.Any
		var n int
		var err error
		switch f[0] {
		case "ip", "ip6":
			m, n, err = e.addrMatch(f)
		case "tcp", "udp", "sctp":
			m, n, err = portMatch(f)
		case "meta":
			m, n, err = l4protoMatch(f)
		case "fib":
			m, n, err = fibLocalMatch(f)
		case "numgen":
			m, n, err = numgenMatch(f)
		case "iifname":
			m, n, err = ifnameMatch(f)
		default:
			err = errNotEncodable
		}
		if err != nil {
			return nil, err
		}
		out, f = append(out, m...), f[n:]
	}
	return nil, errNotEncodable // no final statement
}

// addrLoad loads "ip saddr" (or daddr, or ip6's) into reg1.
func (e *nlEncoder) addrLoad(fam, field string) (*expr.Payload, bool) {
	off, ok := e.addrOffset(fam, field)
	if !ok {
		return nil, false
	}
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(e.ipLen())}, true
}

func (e *nlEncoder) addrOffset(fam, field string) (uint32, bool) {
	switch {
	case fam == "ip" && e.family == unix.NFPROTO_IPV4 && field == "saddr":
		return 12, true
	case fam == "ip" && e.family == unix.NFPROTO_IPV4 && field == "daddr":
		return 16, true
	case fam == "ip6" && e.family == unix.NFPROTO_IPV6 && field == "saddr":
		return 8, true
	case fam == "ip6" && e.family == unix.NFPROTO_IPV6 && field == "daddr":
		return 24, true
	}
	return 0, false
}

// addrMatch: "ip saddr [!=] ADDR|CIDR", "ip saddr @set", "ip saddr != { X }"
// (one element: nft makes it a plain match).
func (e *nlEncoder) addrMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 3 {
		return nil, 0, errNotEncodable
	}
	off, ok := e.addrOffset(f[0], f[1])
	if !ok {
		return nil, 0, errNotEncodable
	}
	n := 2
	op := expr.CmpOpEq
	if f[n] == "!=" {
		op, n = expr.CmpOpNeq, n+1
	}
	if n >= len(f) {
		return nil, 0, errNotEncodable
	}
	if op == expr.CmpOpEq && strings.HasPrefix(f[n], "@") {
		return []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(e.ipLen())},
			&expr.Lookup{SourceRegister: reg1, SetName: f[n][1:]},
		}, n + 1, nil
	}
	val := f[n]
	if val == "{" {
		var elems []string
		end := -1
		for i := n + 1; i < len(f); i++ {
			if f[i] == "}" {
				end = i
				break
			}
			elems = append(elems, strings.TrimSuffix(f[i], ","))
		}
		if end < 0 || len(elems) == 0 {
			return nil, 0, errNotEncodable
		}
		if len(elems) > 1 {
			// An anonymous interval set, looked up.
			id, err := e.anonymousPrefixSet(elems)
			if err != nil {
				return nil, 0, err
			}
			return []expr.Any{
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(e.ipLen())},
				&expr.Lookup{SourceRegister: reg1, SetName: anonymousSetName, SetID: id, Invert: op == expr.CmpOpNeq},
			}, end + 1, nil
		}
		// One element: nft makes it a plain match.
		val, n = elems[0], end
	}
	pfx, err := e.parsePrefix(val)
	if err != nil {
		return nil, 0, err
	}
	bits, full := pfx.Bits(), e.ipLen()
	addr := pfx.Addr().AsSlice()
	// nft loads a byte-aligned prefix short and compares it; any other
	// prefix it loads whole and masks.
	var out []expr.Any
	if bits%8 == 0 {
		addr = addr[:bits/8]
		out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(len(addr))})
	} else {
		mask := make([]byte, full)
		for i := 0; i < bits/8; i++ {
			mask[i] = 0xff
		}
		mask[bits/8] = byte(0xff << (8 - bits%8))
		out = append(out,
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(full)},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: uint32(full), Mask: mask, Xor: make([]byte, full)})
	}
	out = append(out, &expr.Cmp{Op: op, Register: reg1, Data: addr})
	return out, n + 1, nil
}

// parsePrefix reads an address or a prefix of the encoder's family,
// masked; a zero-length prefix is not encodable (nft drops the match).
func (e *nlEncoder) parsePrefix(val string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(val)
	if err != nil {
		a, aerr := netip.ParseAddr(val)
		if aerr != nil {
			return netip.Prefix{}, errNotEncodable
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if pfx.Addr().BitLen() != e.ipLen()*8 || pfx.Addr().Zone() != "" || pfx.Bits() == 0 {
		return netip.Prefix{}, errNotEncodable
	}
	return pfx.Masked(), nil
}

// anonymousSetName is the name nft gives an anonymous set: the kernel
// fills in a free number, and the batch refers to it by its id.
const anonymousSetName = "__set%d"

// anonymousPrefixSet adds the constant interval set nft makes of
// "{ A, B/n, … }" (set, then elements) and returns its id. nft sends each
// prefix as its start and, flagged as an interval end, the address after
// its last one, in ascending order, led by an interval end at the zero
// address unless a prefix starts there. Prefixes that overlap or touch
// (nft merges them) or reach the last address (an open interval) are
// left to nft.
func (e *nlEncoder) anonymousPrefixSet(elems []string) (uint32, error) {
	type span struct{ start, next netip.Addr }
	var spans []span
	for _, v := range elems {
		pfx, err := e.parsePrefix(v)
		if err != nil {
			return 0, err
		}
		last := lastAddr(pfx)
		next := last.Next()
		if !next.IsValid() {
			return 0, errNotEncodable
		}
		spans = append(spans, span{pfx.Addr(), next})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Less(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Compare(spans[i-1].next) <= 0 {
			return 0, errNotEncodable
		}
	}
	zero := netip.IPv4Unspecified()
	keyType, desc, field := uint32(7), uint32(12), uint32(11) // ipv4_addr; payload ip, saddr
	if e.ipLen() == 16 {
		zero = netip.IPv6Unspecified()
		keyType, desc, field = 8, 13, 8 // ipv6_addr; payload ip6, saddr
	}
	type elem struct {
		key []byte
		end bool
	}
	var out []elem
	if spans[0].start != zero {
		out = append(out, elem{zero.AsSlice(), true})
	}
	for _, sp := range spans {
		out = append(out, elem{sp.start.AsSlice(), false}, elem{sp.next.AsSlice(), true})
	}
	e.setID++
	id := e.setID
	u32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	tlv := func(typ byte, v []byte) []byte { return append([]byte{typ, byte(len(v))}, v...) }
	typeof := append(tlv(0, u32(7)), tlv(1, append(tlv(0, u32(desc)), tlv(1, u32(field))...))...)
	ud := append(append(tlv(0, u32(2)), tlv(2, u32(1))...), tlv(3, typeof)...)
	e.add(unix.NFT_MSG_NEWSET, netlink.Create, func(ae *attrWriter) {
		ae.String(unix.NFTA_SET_TABLE, e.table)
		ae.String(unix.NFTA_SET_NAME, anonymousSetName)
		ae.Uint32(unix.NFTA_SET_FLAGS, unix.NFT_SET_ANONYMOUS|unix.NFT_SET_CONSTANT|unix.NFT_SET_INTERVAL)
		ae.Uint32(unix.NFTA_SET_KEY_TYPE, keyType)
		ae.Uint32(unix.NFTA_SET_KEY_LEN, uint32(e.ipLen()))
		ae.Uint32(unix.NFTA_SET_ID, id)
		ae.Nested(unix.NFTA_SET_DESC, func(nae *attrWriter) error {
			nae.Uint32(unix.NFTA_SET_DESC_SIZE, uint32(len(out)))
			return nil
		})
		ae.Bytes(unix.NFTA_SET_USERDATA, ud)
	})
	var list []byte
	for _, el := range out {
		var b []byte
		if el.end {
			b = nlattr(unix.NFTA_SET_ELEM_FLAGS, binary.BigEndian.AppendUint32(nil, unix.NFT_SET_ELEM_INTERVAL_END))
		}
		b = append(b, nlattr(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_KEY, nlattr(unix.NFTA_DATA_VALUE, el.key))...)
		list = append(list, nlattr(unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, b)...)
	}
	e.add(unix.NFT_MSG_NEWSETELEM, netlink.Create, func(ae *attrWriter) {
		ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, e.table)
		ae.String(unix.NFTA_SET_ELEM_LIST_SET, anonymousSetName)
		ae.Uint32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
		ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_LIST_ELEMENTS, list)
	})
	return id, nil
}

// lastAddr is the last address of a (masked) prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// l4proto is "meta l4proto P" (also nft's implicit dependency of a port
// match).
func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

func l4protoMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 3 || f[1] != "l4proto" {
		return nil, 0, errNotEncodable
	}
	p, ok := protoNumber(f[2])
	if !ok {
		return nil, 0, errNotEncodable
	}
	return l4proto(p), 3, nil
}

// portMatch: "tcp dport N".
func portMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 3 || f[1] != "dport" {
		return nil, 0, errNotEncodable
	}
	p, _ := protoNumber(f[0])
	port, err := strconv.ParseUint(f[2], 10, 16)
	if err != nil {
		return nil, 0, errNotEncodable
	}
	out := l4proto(p)
	out = append(out,
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(port >> 8), byte(port)}})
	return out, 3, nil
}

// fibLocalMatch: "fib saddr type local".
func fibLocalMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 4 || f[1] != "saddr" || f[2] != "type" || f[3] != "local" {
		return nil, 0, errNotEncodable
	}
	local := make([]byte, 4)
	binary.NativeEndian.PutUint32(local, unix.RTN_LOCAL)
	return []expr.Any{
		&expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: local},
	}, 4, nil
}

// numgenMatch: "numgen random mod N V".
func numgenMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 5 || f[1] != "random" || f[2] != "mod" {
		return nil, 0, errNotEncodable
	}
	mod, err := strconv.ParseUint(f[3], 10, 32)
	if err != nil || mod == 0 {
		return nil, 0, errNotEncodable
	}
	v, err := strconv.ParseUint(f[4], 10, 32)
	if err != nil {
		return nil, 0, errNotEncodable
	}
	val := make([]byte, 4)
	binary.NativeEndian.PutUint32(val, uint32(v))
	return []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: uint32(mod), Type: unix.NFT_NG_RANDOM},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: val},
	}, 5, nil
}

// ifnameMatch: `iifname [!=] "name"` (the whole 16-byte name) or
// `"prefix*"` (the prefix only).
func ifnameMatch(f []string) ([]expr.Any, int, error) {
	n := 1
	op := expr.CmpOpEq
	if len(f) > n && f[n] == "!=" {
		op, n = expr.CmpOpNeq, n+1
	}
	if len(f) <= n {
		return nil, 0, errNotEncodable
	}
	q := f[n]
	if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
		return nil, 0, errNotEncodable
	}
	name := q[1 : len(q)-1]
	if name == "" || strings.ContainsAny(name, "\"\\ ") || len(name) >= unix.IFNAMSIZ {
		return nil, 0, errNotEncodable
	}
	var data []byte
	if p, ok := strings.CutSuffix(name, "*"); ok {
		if p == "" || strings.Contains(p, "*") {
			return nil, 0, errNotEncodable
		}
		data = []byte(p)
	} else {
		if strings.Contains(name, "*") {
			return nil, 0, errNotEncodable
		}
		data = make([]byte, unix.IFNAMSIZ)
		copy(data, name)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Cmp{Op: op, Register: reg1, Data: data},
	}, n + 1, nil
}

// dnat: "dnat to IP:port" or "dnat to [IP6]:port", after its "meta
// l4proto" match.
func (e *nlEncoder) dnat(to string) ([]expr.Any, error) {
	ap, err := netip.ParseAddrPort(to)
	if err != nil || ap.Addr().BitLen() != e.ipLen()*8 || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return nil, errNotEncodable
	}
	fam := uint32(unix.NFPROTO_IPV4)
	if e.family == unix.NFPROTO_IPV6 {
		fam = unix.NFPROTO_IPV6
	}
	port := ap.Port()
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: ap.Addr().AsSlice()},
		&expr.Immediate{Register: reg2, Data: []byte{byte(port >> 8), byte(port)}},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegAddrMax: reg1,
			RegProtoMin: reg2, RegProtoMax: reg2, Specified: true},
	}, nil
}
