//go:build linux

package nftkernel

import (
	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/nftables"
)

// The element dump's parsing: a verdict map's element (goto a chain), a
// data map's, a set's, nested as the kernel lists them, and a truncated
// attribute refused.
func TestParseListedElements(t *testing.T) {
	nested := func(typ uint16, parts ...[]byte) []byte {
		return appendAttr(nil, typ|unix.NLA_F_NESTED, bytes.Join(parts, nil))
	}
	gotoCode := int32(unix.NFT_GOTO)
	goto32 := uint32(gotoCode)
	key := nested(unix.NFTA_SET_ELEM_KEY, appendAttr(nil, unix.NFTA_DATA_VALUE, []byte{10, 96, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0}))
	verdict := nested(unix.NFTA_SET_ELEM_DATA, nested(unix.NFTA_DATA_VERDICT,
		appendAttr(nil, unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, goto32)),
		appendAttr(nil, unix.NFTA_VERDICT_CHAIN, []byte("service-ABC-ns/svc/tcp/p80\x00"))))
	data := nested(unix.NFTA_SET_ELEM_DATA, appendAttr(nil, unix.NFTA_DATA_VALUE, []byte{10, 0, 0, 7, 0x1f, 0x90, 0, 0}))
	list := nested(unix.NFTA_SET_ELEM_LIST_ELEMENTS,
		nested(unix.NFTA_LIST_ELEM, key, verdict),
		nested(unix.NFTA_LIST_ELEM, key, data),
		nested(unix.NFTA_LIST_ELEM, key))
	var got []nftables.ListedElement
	if err := eachElement(list, func(el []byte) error {
		le, err := parseElement(el)
		got = append(got, le)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d elements, want 3", len(got))
	}
	for i, le := range got {
		if !bytes.Equal(le.Key, []byte{10, 96, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0}) {
			t.Errorf("element %d: key %v", i, le.Key)
		}
	}
	if g := got[0]; !g.HasVerdict || g.Verdict != unix.NFT_GOTO || g.Chain != "service-ABC-ns/svc/tcp/p80" || g.Data != nil {
		t.Errorf("verdict element: %+v", g)
	}
	if g := got[1]; g.HasVerdict || !bytes.Equal(g.Data, []byte{10, 0, 0, 7, 0x1f, 0x90, 0, 0}) {
		t.Errorf("data element: %+v", g)
	}
	if g := got[2]; g.HasVerdict || g.Data != nil {
		t.Errorf("set element: %+v", g)
	}
	if err := eachElement(list[:len(list)-3], func([]byte) error { return nil }); err == nil {
		t.Error("a truncated list parsed")
	}
}
