//go:build linux

package nftables

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// The engine reads its elements back from the kernel's bytes, as it
// writes them (nlencode.go): a ChainCommentLister hands over each element
// as the kernel lists it (ListedElement) and the engine decodes its key
// by the container's layout.

// listElements reads the elements of container c through lister, typed
// from the kernel's bytes; family is the table's (NFPROTO_IPV4 or
// NFPROTO_IPV6).
func listElements(ctx context.Context, lister ChainCommentLister, c container, family byte) (elemSet, []foreignElem, error) {
	ipLen := 4
	if family == unix.NFPROTO_IPV6 {
		ipLen = 16
	}
	name, lay := c.name(), c.layout()
	var out elemSet
	var foreign []foreignElem
	err := lister.ListElements(ctx, name, func(n int) { out = make(elemSet, n) }, func(e ListedElement) error {
		key, text, err := decodeKey(e.Key, lay, ipLen)
		if err != nil {
			return fmt.Errorf("netlink: element of %s: %w", name, err)
		}
		if text != nil {
			foreign = append(foreign, foreignElem{container: c, key: text})
			return nil
		}
		var v verdict
		if e.HasVerdict {
			v = verdictFromCode(e.Verdict, e.Chain)
		}
		if out == nil { // a lister that did not call start
			out = elemSet{}
		}
		out.putValue(key, v)
		return nil
	})
	if out == nil && err == nil {
		out = elemSet{}
	}
	return out, foreign, err
}

// decodeKey reads a concatenated key of layout l; every field takes a
// multiple of 4 bytes. A hairpin-connections key whose two addresses
// differ (never the engine's) is returned as its text, foreign.
func decodeKey(b []byte, l keyLayout, ipLen int) (k elemKey, foreign []string, err error) {
	var a2 netip.Addr
	addr := func(a *netip.Addr) bool {
		if len(b) < ipLen {
			return false
		}
		*a, _ = netip.AddrFromSlice(b[:ipLen])
		b = b[ipLen:]
		return true
	}
	switch l {
	case layoutAddr:
		if !addr(&k.addr) {
			return k, nil, errShortKey
		}
		return k, nil, nil
	case layoutHairpin:
		if !addr(&k.addr) || !addr(&a2) {
			return k, nil, errShortKey
		}
	case layoutAddrProtoPort:
		if !addr(&k.addr) {
			return k, nil, errShortKey
		}
	}
	if len(b) < 8 {
		return k, nil, errShortKey
	}
	k.proto, k.port = b[0], binary.BigEndian.Uint16(b[4:6])
	if l == layoutHairpin && a2 != k.addr {
		return k, []string{k.addr.String(), a2.String(), protoName(k.proto), strconv.Itoa(int(k.port))}, nil
	}
	return k, nil, nil
}

// decodeAddrPort reads an endpoint map element's value: an address of
// ipLen bytes, then a port (big endian) padded to 4 bytes.
func decodeAddrPort(b []byte, ipLen int) (netip.AddrPort, error) {
	if len(b) < ipLen+2 {
		return netip.AddrPort{}, errShortKey
	}
	a, _ := netip.AddrFromSlice(b[:ipLen])
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[ipLen:])), nil
}

// listEps reads endpoint map c (endpoint_maps.go) through lister: each
// element's key (numgen's value, host byte order) and value (address and
// port). An element whose bytes are not of that form is foreign (deleted
// by its key).
func listEps(ctx context.Context, lister ChainCommentLister, c container, family byte) (epSet, []foreignElem, error) {
	ipLen := 4
	if family == unix.NFPROTO_IPV6 {
		ipLen = 16
	}
	name := c.name()
	var out *listedEps
	var foreign []foreignElem
	err := lister.ListElements(ctx, name, func(n int) { out = newListedEps(n) }, func(e ListedElement) error {
		if len(e.Key) != 4 {
			return fmt.Errorf("netlink: element of %s: key of %d bytes", name, len(e.Key))
		}
		idx := binary.NativeEndian.Uint32(e.Key)
		ap, err := decodeAddrPort(e.Data, ipLen)
		if err != nil || e.HasVerdict || len(e.Data) != ipLen+4 {
			foreign = append(foreign, foreignElem{container: c, key: []string{strconv.FormatUint(uint64(idx), 10)}})
			return nil
		}
		if out == nil {
			out = newListedEps(0)
		}
		out.add(uint8(c-ctrEndpoints), idx, makeEpVal(ap))
		return nil
	})
	if out == nil {
		out = newListedEps(0)
	}
	return out.done(), foreign, err
}
