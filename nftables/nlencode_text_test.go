//go:build linux

package nftables

// The netlink encoder's rules as it built them before the planner typed
// them: nft text parsed back into google/nftables expressions and
// marshalled by it. Kept as the reference the typed encoding is compared
// with, byte for byte (TestTypedRulesEncodeAsParsedText).

import (
	"encoding/binary"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func textVerdict(f []string) (*expr.Verdict, bool) {
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

// rule parses one rule of the planner's forms (matches, then one final
// statement) into the expressions nft generates for it.
func (e *nlEncoder) textRule(text string) ([]expr.Any, error) {
	f := strings.Fields(text)
	var out []expr.Any
	for len(f) > 0 {
		// Final statements.
		if v, ok := textVerdict(f); ok {
			return append(out, v), nil
		}
		switch {
		case f[0] == "dnat" && len(f) == 11 && f[2] == "to" && strings.Join(f[3:6], " ") == "numgen random mod" &&
			f[7] == "offset" && f[9] == "map" && strings.HasPrefix(f[10], "@"):
			// "dnat ip to numgen random mod N offset K map @M": the
			// endpoint maps' rule (after its "meta l4proto P").
			if f[1] != map[bool]string{false: "ip", true: "ip6"}[e.ipLen() == 16] {
				return nil, errNotEncodable
			}
			mod, err1 := strconv.ParseUint(f[6], 10, 32)
			off, err2 := strconv.ParseUint(f[8], 10, 32)
			if err1 != nil || err2 != nil || mod < 2 {
				return nil, errNotEncodable
			}
			fam, portReg := uint32(unix.NFPROTO_IPV4), uint32(unix.NFT_REG32_01)
			if e.ipLen() == 16 {
				fam, portReg = unix.NFPROTO_IPV6, reg2
			}
			return append(out,
				&expr.Numgen{Register: reg1, Modulus: uint32(mod), Type: unix.NFT_NG_RANDOM, Offset: uint32(off)},
				&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: f[10][1:]},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegAddrMax: reg1,
					RegProtoMin: portReg, RegProtoMax: portReg, Specified: true}), nil
		case f[0] == "dnat" && len(f) == 3 && f[1] == "to":
			x, err := e.textDNAT(f[2])
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
			load, ok := e.textAddrLoad(f[3], f[4])
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
			m, n, err = e.textAddrMatch(f)
		case "tcp", "udp", "sctp":
			m, n, err = textPortMatch(f)
		case "meta":
			m, n, err = textL4protoMatch(f)
		case "fib":
			m, n, err = textFibLocalMatch(f)
		case "numgen":
			m, n, err = textNumgenMatch(f)
		case "iifname":
			m, n, err = textIfnameMatch(f)
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
func (e *nlEncoder) textAddrLoad(fam, field string) (*expr.Payload, bool) {
	off, ok := e.addrOffset(fam, field)
	if !ok {
		return nil, false
	}
	return &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(e.ipLen())}, true
}

// addrMatch: "ip saddr [!=] ADDR|CIDR", "ip saddr @set", "ip saddr != { X }"
// (one element: nft makes it a plain match).
func (e *nlEncoder) textAddrMatch(f []string) ([]expr.Any, int, error) {
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
			var pfxs []netip.Prefix
			for _, v := range elems {
				p, err := e.parsePrefix(v)
				if err != nil {
					return nil, 0, err
				}
				pfxs = append(pfxs, p)
			}
			id, err := e.anonymousPrefixSet(pfxs)
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

// l4proto is "meta l4proto P" (also nft's implicit dependency of a port
// match).
func textL4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

func textL4protoMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 3 || f[1] != "l4proto" {
		return nil, 0, errNotEncodable
	}
	p, ok := protoNumber(f[2])
	if !ok {
		return nil, 0, errNotEncodable
	}
	return textL4proto(p), 3, nil
}

// portMatch: "tcp dport N".
func textPortMatch(f []string) ([]expr.Any, int, error) {
	if len(f) < 3 || f[1] != "dport" {
		return nil, 0, errNotEncodable
	}
	p, _ := protoNumber(f[0])
	port, err := strconv.ParseUint(f[2], 10, 16)
	if err != nil {
		return nil, 0, errNotEncodable
	}
	out := textL4proto(p)
	out = append(out,
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{byte(port >> 8), byte(port)}})
	return out, 3, nil
}

// fibLocalMatch: "fib saddr type local".
func textFibLocalMatch(f []string) ([]expr.Any, int, error) {
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
func textNumgenMatch(f []string) ([]expr.Any, int, error) {
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
func textIfnameMatch(f []string) ([]expr.Any, int, error) {
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
func (e *nlEncoder) textDNAT(to string) ([]expr.Any, error) {
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

func (e *nlEncoder) textAddRule(chain string, exprs []expr.Any, comment string) {
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
	return e.checkPrefix(pfx)
}

// The encoder's elements as it wrote them before they were typed: key
// and value nft text, parsed back field by field. Kept as the reference
// the typed encoding is compared with (TypedEncodingMismatches).

// textElem is an element as the planner wrote it then.
type textElem struct {
	container, key, value, comment string
	set                            bool
}

func (e *nlEncoder) textElements(msgType uint16, elems []textElem, add bool) error {
	for i := 0; i < len(elems); {
		j := i
		for ; j < len(elems) && elems[j].container == elems[i].container; j++ {
			if err := e.textCheckElement(elems[j], add); err != nil {
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
						e.textElement(ae, el, add)
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

func (e *nlEncoder) textCheckElement(el textElem, add bool) error {
	if _, err := e.textElementKey(el.key); err != nil {
		return err
	}
	if !add {
		return nil
	}
	if !el.set {
		if _, _, ok := textParseVerdict(el.value); !ok {
			return errNotEncodable
		}
	}
	if len(el.comment) > maxComment {
		return errNotEncodable
	}
	return nil
}

func (e *nlEncoder) textElement(ae *attrWriter, el textElem, add bool) {
	key, _ := e.textElementKey(el.key)
	ae.Nested(unix.NFTA_SET_ELEM_KEY, func(ae *attrWriter) error {
		ae.Bytes(unix.NFTA_DATA_VALUE, key)
		return nil
	})
	if !add {
		return
	}
	if !el.set {
		v, _ := textVerdictData(el.value)
		ae.Bytes(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_DATA, v)
	}
	if el.comment != "" {
		s := ae.begin(unix.NFTA_SET_ELEM_USERDATA)
		ae.b = appendUserdataComment(ae.b, el.comment)
		ae.end(s)
	}
}

func (e *nlEncoder) textElementKey(text string) ([]byte, error) {
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

func textVerdictData(text string) ([]byte, error) {
	code, chain, ok := textParseVerdict(text)
	if !ok {
		return nil, errNotEncodable
	}
	inner := nlattr(unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, uint32(code)))
	if chain != "" {
		inner = append(inner, nlattr(unix.NFTA_VERDICT_CHAIN, append([]byte(chain), 0))...)
	}
	return nlattr(unix.NLA_F_NESTED|unix.NFTA_DATA_VERDICT, inner), nil
}

func textParseVerdict(text string) (code int32, chain string, ok bool) {
	switch verb, arg, two := strings.Cut(text, " "); {
	case two && verb == "goto" && arg != "" && !strings.Contains(arg, " "):
		return unix.NFT_GOTO, arg, true
	case two && verb == "jump" && arg != "" && !strings.Contains(arg, " "):
		return unix.NFT_JUMP, arg, true
	case two:
		return 0, "", false
	case verb == "drop":
		return nfDrop, "", true
	case verb == "accept":
		return nfAccept, "", true
	case verb == "return":
		return unix.NFT_RETURN, "", true
	}
	return 0, "", false
}
