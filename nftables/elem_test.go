//go:build linux

package nftables

import (
	"context"
	"encoding/binary"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"
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
			if c.isData() {
				continue // TestEndpointMapElemRoundTrips
			}
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
			if v, _ := m.get(k); len(foreign) != 0 || v != gotoVerdict("x") || len(m) != 1 || idOf(k).key() != k {
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

// TestEndpointMapElemRoundTrips: an endpoint map's element (a numgen
// value under which an address and port are stored) reads back as it was
// from nft's text and from the bytes the encoder writes, and a value not
// as nft lists it, or bytes not of that form, are foreign.
func TestEndpointMapElemRoundTrips(t *testing.T) {
	for _, fam := range []struct {
		nf byte
		ep netip.AddrPort
	}{
		{unix.NFPROTO_IPV4, netip.MustParseAddrPort("10.128.0.10:8080")},
		{unix.NFPROTO_IPV6, netip.MustParseAddrPort("[fd00:10::a]:53")},
	} {
		e := newNLEncoder(fam.nf)
		for _, m := range []uint8{0, numEndpointMaps - 1, 70} {
			c := ctrEndpoints + container(m)
			if !c.isData() || c.isSet() || c.layout() != layoutIndex || !strings.HasPrefix(c.name(), prefixEndpointMap) || endpointMap(m) != c.name() {
				t.Fatalf("container %d (%s): not an endpoint map", c, c.name())
			}
			el := epElem{idx: 4096*7 + 3, m: m, ep: makeEpVal(fam.ep)}
			if el.ep.addrPort() != fam.ep || el.ctr() != c {
				t.Fatalf("%s: %v back as %v", c.name(), fam.ep, el.ep.addrPort())
			}
			key, value := el.keyText(), el.valueText()
			if !slices.Equal(key, []string{"28675"}) || !slices.Equal(value, []string{fam.ep.Addr().String(), itoa(int(fam.ep.Port()))}) {
				t.Errorf("%s: text %q : %q", c.name(), key, value)
			}
			got, foreign := parseListedEps(c, []*knftables.Element{{Key: key, Value: value}})
			if v, _ := got.get(el.idx); v != el.ep || got.len() != 1 || len(foreign) != 0 {
				t.Errorf("%s: listed as %v, foreign %v", c.name(), got, foreign)
			}
			for _, odd := range [][]string{{}, {value[0]}, {value[0], "0x50"}, {"10.0.0.1.80"}} {
				if got, foreign := parseListedEps(c, []*knftables.Element{{Key: key, Value: odd}}); got.len() != 0 || len(foreign) != 1 {
					t.Errorf("%s: value %q not foreign: %v", c.name(), odd, got)
				}
			}
			if got, foreign := parseListedEps(c, []*knftables.Element{{Key: []string{"0x1003"}, Value: value}}); got.len() != 0 || len(foreign) != 1 {
				t.Errorf("%s: key 0x1003 not foreign: %v", c.name(), got)
			}
			// The bytes the encoder writes, decoded as a listing hands them.
			if err := e.epElements(unix.NFT_MSG_NEWSETELEM, []epElem{el}, true); err != nil {
				t.Fatal(err)
			}
			data := append(slices.Clone(el.ep.addr[:e.ipLen()]), byte(fam.ep.Port()>>8), byte(fam.ep.Port()), 0, 0)
			lister := &fakeEpLister{elems: []ListedElement{{Key: binary.NativeEndian.AppendUint32(nil, el.idx), Data: data}}}
			set, foreign, err := listEps(context.Background(), lister, c, fam.nf)
			if v, _ := set.get(el.idx); err != nil || len(foreign) != 0 || v != el.ep || set.len() != 1 {
				t.Errorf("%s: decoded as %v, %v, %v", c.name(), set, foreign, err)
			}
			lister.elems[0].Data = data[:e.ipLen()+1]
			if set, foreign, err := listEps(context.Background(), lister, c, fam.nf); err != nil || len(foreign) != 1 || set.len() != 0 {
				t.Errorf("%s: a short value decoded: %v, %v, %v", c.name(), set, foreign, err)
			}
		}
	}
}

// fakeEpLister lists fixed elements.
type fakeEpLister struct {
	ChainCommentLister
	elems []ListedElement
}

func (l *fakeEpLister) ListElements(_ context.Context, _ string, start func(int), fn func(ListedElement) error) error {
	start(len(l.elems))
	for _, e := range l.elems {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// The record of the elements points at the planned values: a new plan
// with the same value takes the record over (the old plan is not kept
// alive by it), a new value is replaced, and nothing is written for the
// same value.
func TestElemRecordFollowsPlans(t *testing.T) {
	k := addrProtoPortKey(netip.MustParseAddr("10.96.0.1"), unix.IPPROTO_TCP, 80)
	old := []elemSpec{{container: ctrServiceIPs, key: k, value: gotoVerdict("service-a")}}
	st := newTableState()
	st.elems[ctrServiceIPs].put(k, &old[0].value)

	same := []elemSpec{{container: ctrServiceIPs, key: k, value: gotoVerdict("service-a")}}
	cs := newChangeSet()
	cs.diffElems(st, same, old)
	if len(cs.elemAdds)+len(cs.elemDels) != 0 {
		t.Fatalf("the same value written again: adds %d, dels %d", len(cs.elemAdds), len(cs.elemDels))
	}
	if st.elems[ctrServiceIPs][idOf(k)] != &same[0].value {
		t.Error("the record still points into the old plan")
	}

	other := []elemSpec{{container: ctrServiceIPs, key: k, value: gotoVerdict("service-b")}}
	cs = newChangeSet()
	cs.diffElems(st, other, same)
	if len(cs.elemAdds) != 1 || len(cs.elemDels) != 1 {
		t.Fatalf("a new value: adds %d, dels %d; want 1, 1", len(cs.elemAdds), len(cs.elemDels))
	}
	cs.commit(st, map[types.NamespacedName]*servicePlan{}, time.Now())
	if v, ok := st.elems[ctrServiceIPs].get(k); !ok || v != gotoVerdict("service-b") || st.elems[ctrServiceIPs][idOf(k)] != &other[0].value {
		t.Errorf("after the commit: %v, %v", v, ok)
	}
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("fd00::1")} {
		if k := (elemKey{addr: a, port: 7, proto: unix.IPPROTO_UDP}); idOf(k).key() != k {
			t.Errorf("%v: packed and back as %v", k, idOf(k).key())
		}
	}
}
