package xtblob

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// testEncoder encodes the few rules the table tests write, as iptables
// 1.8.9 does, until Encoder covers them: -s/-d ADDR[/LEN], -m comment
// --comment "TEXT", -j ACCEPT|DROP|RETURN|CHAIN, -g CHAIN, -j MARK
// --set-xmark V/M, and no target at all.
type testEncoder struct{ fam Family }

func newTestEncoder(f Family) ruleEncoder { return testEncoder{fam: f} }

// tokens splits a rule as iptables-restore does (double quotes group).
func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	in, any := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			in, any = !in, true
		case !in && (c == ' ' || c == '\t'):
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteByte(c)
			any = true
		}
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

func (e testEncoder) AppendRule(dst []byte, text []byte) ([]byte, RuleRef, error) {
	lay := &layouts[e.fam]
	ref := RuleRef{VerdictAt: -1}
	ent := make([]byte, lay.entrySize)
	var matches []byte
	var target []byte
	tk := tokens(string(text))
	for i := 0; i < len(tk); i++ {
		arg := func() (string, error) {
			if i+1 >= len(tk) {
				return "", fmt.Errorf("%s needs an argument", tk[i])
			}
			i++
			return tk[i], nil
		}
		switch tk[i] {
		case "-s", "-d":
			which := tk[i]
			a, err := arg()
			if err != nil {
				return dst, ref, err
			}
			if !strings.Contains(a, "/") {
				if e.fam == IPv4 {
					a += "/32"
				} else {
					a += "/128"
				}
			}
			pfx, err := netip.ParsePrefix(a)
			if err != nil || pfx.Addr().Is4() != (e.fam == IPv4) {
				return dst, ref, fmt.Errorf("bad address %q", a)
			}
			n := 4
			if e.fam == IPv6 {
				n = 16
			}
			addrAt, maskAt := 0, 2*n
			if which == "-d" {
				addrAt, maskAt = n, 3*n
			}
			ab := pfx.Masked().Addr().AsSlice()
			copy(ent[addrAt:], ab)
			for b := 0; b < pfx.Bits(); b++ {
				ent[maskAt+b/8] |= 0x80 >> (b % 8)
			}
		case "-m":
			m, err := arg()
			if err != nil {
				return dst, ref, err
			}
			if m != "comment" || i+2 >= len(tk) || tk[i+1] != "--comment" {
				return dst, ref, fmt.Errorf("%w: match %s", ErrUnsupported, m)
			}
			i += 2
			mb := make([]byte, 32+256)
			binary.NativeEndian.PutUint16(mb, uint16(len(mb)))
			copy(mb[2:], "comment")
			copy(mb[32:32+255], tk[i])
			matches = append(matches, mb...)
		case "-j", "-g":
			isGoto := tk[i] == "-g"
			name, err := arg()
			if err != nil {
				return dst, ref, err
			}
			if name == "MARK" {
				if i+2 >= len(tk) || tk[i+1] != "--set-xmark" {
					return dst, ref, fmt.Errorf("%w: MARK without --set-xmark", ErrUnsupported)
				}
				i += 2
				var v, m uint32
				if _, err := fmt.Sscanf(tk[i], "0x%x/0x%x", &v, &m); err != nil {
					return dst, ref, fmt.Errorf("bad mark %q", tk[i])
				}
				target = make([]byte, 40)
				binary.NativeEndian.PutUint16(target, 40)
				copy(target[2:], "MARK")
				target[31] = 2
				binary.NativeEndian.PutUint32(target[32:], v)
				binary.NativeEndian.PutUint32(target[36:], m)
				continue
			}
			target = make([]byte, standardSize)
			binary.NativeEndian.PutUint16(target, standardSize)
			switch name {
			case "ACCEPT", "DROP", "RETURN", "QUEUE":
				copy(target[2:], name)
			default:
				copy(target[2:], name)
				ref.Jump = text[strings.Index(string(text), name):][:len(name)]
				ref.Goto = isGoto
				if isGoto {
					flagsAt, bit := 82, byte(0x02)
					if e.fam == IPv6 {
						flagsAt, bit = 131, 0x04
					}
					ent[flagsAt] |= bit
				}
			}
		default:
			return dst, ref, fmt.Errorf("%w: %s", ErrUnsupported, tk[i])
		}
	}
	if target == nil { // no target: fall through
		target = make([]byte, standardSize)
		binary.NativeEndian.PutUint16(target, standardSize)
	}
	to := lay.entrySize + len(matches)
	binary.NativeEndian.PutUint16(ent[lay.targetOffsetAt:], uint16(to))
	binary.NativeEndian.PutUint16(ent[lay.nextOffsetAt:], uint16(to+len(target)))
	start := len(dst)
	dst = append(dst, ent...)
	dst = append(dst, matches...)
	if string(target[2:6]) != "MARK" {
		ref.VerdictAt = len(dst) - start + targetHeader
	}
	dst = append(dst, target...)
	return dst, ref, nil
}
