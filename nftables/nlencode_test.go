//go:build linux

package nftables

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// TestEncoderKnowsEveryServiceRule: every rule of a per-service chain in
// the golden table has a netlink encoding (a form the encoder does not
// know would silently send partial syncs back through nft, and their cost
// back to O(table)); the kernel tests prove the encodings equal nft's.
// The rules are the golden table's text parsed by the reference parser
// (nlencode_text_test.go) the typed encoding is compared with
// (TestTypedEncoding).
func TestEncoderKnowsEveryServiceRule(t *testing.T) {
	b, err := os.ReadFile("testdata/golden.nft")
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^add rule ip kube-proxy (\S+) (.*?)( comment ".*")?$`)
	e := newNLEncoder(unix.NFPROTO_IPV4)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		m := rule.FindStringSubmatch(l)
		if m == nil || !isServiceObjectName(m[1]) {
			continue
		}
		n++
		if _, err := e.textRule(m[2]); err != nil {
			t.Errorf("chain %s: %q: %v", m[1], m[2], err)
		}
	}
	if n < 15 { // 19 since the endpoint maps hold what were DNAT rules
		t.Fatalf("only %d service rules in the golden table", n)
	}
}

// TestEncoderFallsBack: forms outside the encoder's knowledge are refused
// whole, so the change set goes through nft.
func TestEncoderFallsBack(t *testing.T) {
	e := newNLEncoder(unix.NFPROTO_IPV4)
	for _, r := range []string{
		"ip saddr != { 203.0.113.0/25, 203.0.113.128/25 } drop", // touching: nft merges
		"ip saddr != { 10.0.0.0/8, 10.1.0.0/16 } drop",          // overlapping
		"ip saddr != { 10.0.0.0/8, 255.255.255.255 } drop",      // open interval
		"ip saddr != { 10.0.0.0/8, 10.1.0.0/16 drop",            // unterminated
		"ip6 saddr fd00::1 drop",                                // other family
		"ip daddr . meta l4proto . th dport vmap @service-ips",
		"ct state new jump cluster-ips-check",
		"ip saddr 10.0.0.1", // no verdict
		"masquerade fully-random",
	} {
		if _, err := e.textRule(r); err == nil {
			t.Errorf("%q encoded; want a fallback to nft", r)
		}
	}
	for _, r := range []ruleSpec{
		textRule("ct state new jump cluster-ips-check", ""), // a fixed chain's rule
		{match: matchSaddrNotIn, x: &ruleExt{notIn: &addrList{prefixes: []netip.Prefix{
			netip.MustParsePrefix("203.0.113.0/25"), netip.MustParsePrefix("203.0.113.128/25")}}}, stmt: stmtDrop}, // touching
		{match: matchSaddrNotIn, x: &ruleExt{notIn: &addrList{prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			addrs: []netip.Addr{netip.MustParseAddr("255.255.255.255")}}}, stmt: stmtDrop}, // open interval
		{match: matchSaddr, addr: netip.MustParseAddr("fd00::1"), bits: 128, stmt: stmtDrop, v6: true}, // other family
		dnatRule(0, 0, netip.MustParseAddrPort("10.0.0.1:80")),                                         // unknown protocol
		{match: matchIifname, x: &ruleExt{set: "a*b"}, stmt: stmtDrop},
	} {
		if err := newNLEncoder(unix.NFPROTO_IPV4).addRule("c", &r, nil); err == nil {
			t.Errorf("%q encoded; want a fallback to nft", r.String())
		}
	}
	cs := newChangeSet()
	cs.partial = true
	cs.writes = append(cs.writes, chainWrite{spec: &chainSpec{name: "services", base: &baseChain{typ: "nat", hook: "prerouting", priority: "-100"}}})
	if _, err := encodeChangeSet(unix.NFPROTO_IPV4, cs); err == nil {
		t.Error("a base chain encoded; want a fallback to nft")
	}
	cs = newChangeSet()
	cs.setAdds = append(cs.setAdds, setSpec{name: "affinity-x", typ: "ipv4_addr", timeout: 3 * time.Hour})
	cs.elemAdds = append(cs.elemAdds, &elemSpec{container: ctrServiceIPs, key: addrProtoPortKey(netip.MustParseAddr("10.96.0.1"), unix.IPPROTO_TCP, 80), value: gotoVerdict("service-x")})
	msgs, err := encodeChangeSet(unix.NFPROTO_IPV4, cs)
	if err != nil || len(msgs) != 2 {
		t.Errorf("set and element: %d messages, %v", len(msgs), err)
	}
}

// TestAttrWriterMatchesAttributeEncoder: the encoder's own attribute
// writer lays attributes out byte for byte as netlink.AttributeEncoder.
func TestAttrWriterMatchesAttributeEncoder(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	var w attrWriter
	for _, s := range []string{"", "a", "ab", "abc", "kube-proxy"} {
		ae.String(1, s)
		w.String(1, s)
	}
	ae.Uint32(2, 0x01020304)
	w.Uint32(2, 0x01020304)
	ae.Uint64(3, 0x0102030405060708)
	w.Uint64(3, 0x0102030405060708)
	for _, b := range [][]byte{{}, {1}, {1, 2, 3}, {1, 2, 3, 4, 5}} {
		ae.Bytes(unix.NLA_F_NESTED|4, b)
		w.Bytes(unix.NLA_F_NESTED|4, b)
	}
	ae.Nested(5, func(n *netlink.AttributeEncoder) error { n.Uint32(1, 7); n.String(2, "x"); return nil })
	w.Nested(5, func(n *attrWriter) error { n.Uint32(1, 7); n.String(2, "x"); return nil })
	want, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.b, want) {
		t.Errorf("attrWriter:\n%x\nAttributeEncoder:\n%x", w.b, want)
	}
}

// An attribute longer than its 16-bit length can say makes the encoding
// refused (nft writes the change set) instead of a truncated message.
func TestEncoderRefusesOverlongAttribute(t *testing.T) {
	e := newNLEncoder(unix.NFPROTO_IPV4)
	e.add(unix.NFT_MSG_NEWSETELEM, 0, func(ae *attrWriter) {
		s := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS)
		ae.b = append(ae.b, make([]byte, 70000)...)
		ae.end(s)
	})
	if !e.w.tooLong {
		t.Fatal("a 70,000-byte attribute was not noticed")
	}
	cs := newChangeSet()
	e = newNLEncoder(unix.NFPROTO_IPV4)
	e.w.tooLong = true
	if _, err := e.changeSet(cs); !errors.Is(err, errNotEncodable) {
		t.Errorf("an encoding with an overlong attribute: %v, want errNotEncodable", err)
	}
}
