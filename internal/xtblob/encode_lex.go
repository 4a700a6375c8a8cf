package xtblob

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"unsafe"
)

// errMalformed is wrapped by the errors for input iptables itself would
// refuse (a bad address, port, number or a missing argument).
var errMalformed = errors.New("xtblob: malformed rule")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

// lexer splits a rule into words the way iptables-restore does
// (add_param_to_argv): words are separated by spaces, tabs or newlines,
// and "..." groups a word with its spaces. Words are sub-slices of the
// rule, so nothing is copied. The rarer forms iptables-restore also
// accepts (a quote inside a word, a backslash escape inside quotes) are
// ErrUnsupported rather than re-implemented.
type lexer struct {
	s []byte
	i int
}

// next returns the next word; ok is false at the end of the input.
func (l *lexer) next() (word []byte, quoted, ok bool, err error) {
	s, i := l.s, l.i
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
		i++
	}
	if i == len(s) {
		l.i = i
		return nil, false, false, nil
	}
	if s[i] == '"' {
		start := i + 1
		n := bytes.IndexByte(s[start:], '"')
		if n < 0 {
			return nil, false, false, malformed("unterminated quote")
		}
		j := start + n
		if bytes.IndexByte(s[start:j], '\\') >= 0 {
			return nil, false, false, unsupported("a backslash inside quotes")
		}
		end := j
		j++
		if j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' {
			return nil, false, false, unsupported("a quote inside a word")
		}
		l.i = j
		return s[start:end], true, true, nil
	}
	start := i
	for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' {
		if s[i] == '"' {
			return nil, false, false, unsupported("a quote inside a word")
		}
		i++
	}
	l.i = i
	return s[start:i], false, true, nil
}

// str views b as a string without copying; the result must not outlive
// a change to b (it is only passed to parsers that do not keep it).
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// parseUint parses an unsigned number as strtoul with base 0 does (the
// way xtables_strtoui reads marks, ports and counts): "0x" hex, a leading
// 0 octal, decimal otherwise, at most max.
func parseUint(b []byte, max uint64) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	base := uint64(10)
	if len(b) > 1 && b[0] == '0' {
		if b[1] == 'x' || b[1] == 'X' {
			base, b = 16, b[2:]
			if len(b) == 0 {
				return 0, false
			}
		} else {
			base, b = 8, b[1:]
		}
	}
	var v uint64
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > max {
			return 0, false
		}
	}
	return v, true
}

// parseDecimal parses a plain decimal number (prefix lengths).
func parseDecimal(b []byte, max int) (int, bool) {
	if len(b) == 0 || len(b) > 4 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, v <= max
}

// parseAddr parses a numeric address of the family. A word that cannot be
// a numeric address (a host name iptables would resolve) is
// ErrUnsupported; a numeric one that does not parse is malformed.
func parseAddr(fam Family, b []byte) (netip.Addr, error) {
	numeric := len(b) > 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9', c == '.':
		case fam == IPv6 && (c == ':' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'):
		default:
			numeric = false
		}
	}
	if !numeric {
		return netip.Addr{}, unsupported("address %q is not numeric", b)
	}
	a, err := netip.ParseAddr(str(b))
	if err != nil {
		if fam == IPv4 {
			// iptables reads IPv4 addresses as inet_aton does: "10.1"
			// is 10.1.0.0 and "010.0.0.1" 8.0.0.1, which Go refuses.
			return netip.Addr{}, unsupported("address %q is not a dotted quad", b)
		}
		return netip.Addr{}, malformed("bad address %q", b)
	}
	if fam == IPv4 && !a.Is4() {
		return netip.Addr{}, malformed("%q is not an IPv4 address", b)
	}
	if fam == IPv6 && a.Is4() {
		return netip.Addr{}, unsupported("IPv4 address %q in an IPv6 rule", b)
	}
	return a, nil
}

// parsePrefix parses addr[/len] (a mask in dotted or colon form is
// ErrUnsupported); without /len the mask covers the whole address.
func parsePrefix(fam Family, b []byte) (netip.Addr, int, error) {
	bits := 32
	if fam == IPv6 {
		bits = 128
	}
	plen := bits
	for i, c := range b {
		if c == '/' {
			n, ok := parseDecimal(b[i+1:], bits)
			if plen := b[i+1:]; len(plen) > 1 && plen[0] == '0' {
				// strtoul with base 0: "010" is 8, "08" an error.
				return netip.Addr{}, 0, unsupported("prefix length %q with a leading zero", plen)
			}
			if !ok {
				for _, m := range b[i+1:] {
					if m == '.' || m == ':' {
						return netip.Addr{}, 0, unsupported("mask %q is not a prefix length", b[i+1:])
					}
				}
				return netip.Addr{}, 0, malformed("bad prefix length in %q", b)
			}
			plen = n
			b = b[:i]
			break
		}
	}
	a, err := parseAddr(fam, b)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	return a, plen, nil
}

// putAddr writes a (masked by plen) and its mask to addr and mask, each
// 4 (IPv4) or 16 bytes long, in network byte order.
func putAddr(addr, mask []byte, a netip.Addr, plen int) {
	var raw []byte
	if len(addr) == 4 {
		a4 := a.As4()
		raw = a4[:]
	} else {
		a16 := a.As16()
		raw = a16[:]
	}
	for i := range mask {
		switch {
		case plen >= 8:
			mask[i] = 0xff
			plen -= 8
		case plen > 0:
			mask[i] = byte(0xff << (8 - plen))
			plen = 0
		default:
			mask[i] = 0
		}
		addr[i] = raw[i] & mask[i]
	}
}

// parsePortRange parses N or N:M (N: means up to 65535, :M from 0), ports
// as xtables_parse_port reads numbers (service names are unsupported).
func parsePortRange(b []byte) (lo, hi uint16, err error) {
	colon := -1
	for i, c := range b {
		if c == ':' {
			colon = i
			break
		}
	}
	if colon < 0 {
		p, err := parsePort(b)
		return p, p, err
	}
	lo, hi = 0, 0xffff
	if colon > 0 {
		if lo, err = parsePort(b[:colon]); err != nil {
			return 0, 0, err
		}
	}
	if colon+1 < len(b) {
		if hi, err = parsePort(b[colon+1:]); err != nil {
			return 0, 0, err
		}
	}
	if lo > hi {
		return 0, 0, malformed("port range %q is inverted", b)
	}
	return lo, hi, nil
}

func parsePort(b []byte) (uint16, error) {
	v, ok := parseUint(b, 0xffff)
	if !ok {
		return 0, numberError("port", b)
	}
	return uint16(v), nil
}

// numberError is the error for a number parseUint refused: malformed when
// the word is plain digits (out of range, or 8 or 9 after a leading 0),
// which iptables refuses too; ErrUnsupported otherwise, since iptables
// reads numbers with strtoul (a sign, a service name for a port, ...).
func numberError(what string, b []byte) error {
	if len(b) == 0 {
		return malformed("empty %s", what)
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return unsupported("%s %q", what, b)
		}
	}
	return malformed("bad %s %q", what, b)
}

// equalFold reports whether b equals the upper-case ASCII word s, in any
// case (iptables reads state and address-type names case-insensitively).
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// forEachItem calls fn for each comma-separated item of b.
func forEachItem(b []byte, fn func(item []byte) error) error {
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == ',' {
			if err := fn(b[start:i]); err != nil {
				return err
			}
			start = i + 1
		}
	}
	return nil
}
