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
				k = hairpinKey(fam.b, unix.IPPROTO_UDP, 53)
			default:
				k = addrProtoPortKey(fam.b, unix.IPPROTO_TCP, 443)
			}
			fields := k.textFields(l)
			if got, ok := parseElemKey(l, fields); !ok || got != k {
				t.Errorf("%s: %q parsed as %+v, %v; want %+v", c.name(), fields, got, ok, k)
			}
			if got, foreign, err := decodeKey(e.appendKey(nil, l, &k), l, e.ipLen()); err != nil || foreign != nil || got != k {
				t.Errorf("%s: %q decoded as %+v, %q, %v", c.name(), fields, got, foreign, err)
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
	// hairpin-connections' key holds one address: two that differ are
	// foreign, read from text or from the kernel's bytes.
	for _, fam := range []struct {
		nf   byte
		a, b string
	}{{unix.NFPROTO_IPV4, "10.0.0.1", "10.0.0.2"}, {unix.NFPROTO_IPV6, "fd00::1", "fd00::2"}} {
		fields := []string{fam.a, fam.b, "tcp", "80"}
		if _, foreign := parseListedElems(ctrHairpin, 1, func(int) ([]string, string) { return fields, "" }); len(foreign) != 1 {
			t.Errorf("hairpin %q not foreign", fields)
		}
		e := newNLEncoder(fam.nf)
		a, b := netip.MustParseAddr(fam.a), netip.MustParseAddr(fam.b)
		raw := append(append(a.AsSlice(), b.AsSlice()...), unix.IPPROTO_TCP, 0, 0, 0, 0, 80, 0, 0)
		if _, foreign, err := decodeKey(raw, layoutHairpin, e.ipLen()); err != nil || !slices.Equal(foreign, fields) {
			t.Errorf("hairpin bytes of %q: foreign %q, %v", fields, foreign, err)
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
