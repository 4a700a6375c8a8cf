//go:build linux

package nftables

import (
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestElemKeyRoundTrips: every container's keys read back from the text
// nft is given (a listing through nft) and from the bytes the encoder
// writes (a listing over netlink) as the key they were; values likewise
// from their text.
func TestElemKeyRoundTrips(t *testing.T) {
	for _, fam := range []struct {
		nf   byte
		a, b netip.Addr
	}{
		{unix.NFPROTO_IPV4, netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr("10.128.0.10")},
		{unix.NFPROTO_IPV6, netip.MustParseAddr("fd00:10:96::1"), netip.MustParseAddr("::ffff:10.1.2.3")},
	} {
		e := newNLEncoder(fam.nf)
		for c := range numContainers {
			l := c.layout()
			var k elemKey
			switch l {
			case layoutAddr:
				k = addrKey(fam.a)
			case layoutProtoPort:
				k = protoPortKey(unix.IPPROTO_SCTP, 30080)
			case layoutHairpin:
				k = elemKey{addr: fam.a, addr2: fam.b, proto: unix.IPPROTO_UDP, port: 53}
			default:
				k = addrProtoPortKey(fam.b, unix.IPPROTO_TCP, 443)
			}
			fields := k.textFields(l)
			if got, ok := parseElemKey(l, fields); !ok || got != k {
				t.Errorf("%s: %q parsed as %+v, %v; want %+v", c.name(), fields, got, ok, k)
			}
			if got, err := decodeKey(e.appendKey(nil, l, &k), l, e.ipLen()); err != nil || got != k {
				t.Errorf("%s: %q decoded as %+v, %v", c.name(), fields, got, err)
			}
			m, foreign := parseListedElems(c, 1, func(int) ([]string, string) { return fields, "goto x" })
			if len(foreign) != 0 || m[k] != gotoVerdict("x") {
				t.Errorf("%s: listed %q as %v, foreign %v", c.name(), fields, m, foreign)
			}
			if l != layoutAddr {
				// A protocol by number: not as nft lists it, so foreign
				// (deleted by its own text), never typed under another.
				odd := slices.Clone(fields)
				odd[len(odd)-2] = "6"
				if _, foreign := parseListedElems(c, 1, func(int) ([]string, string) { return odd, "" }); len(foreign) != 1 {
					t.Errorf("%s: %q not foreign", c.name(), odd)
				}
			}
		}
	}
	for _, text := range []string{"", "drop", "accept", "return", "goto service-x", "jump y", "continue", "goto  x", "verdict 7"} {
		if got := parseVerdictText(text).String(); got != text {
			t.Errorf("verdict %q reads back as %q", text, got)
		}
	}
	if v := parseVerdictText("continue"); v.kind != verdictOther {
		t.Errorf("continue: %+v, want verdictOther", v)
	}
}
