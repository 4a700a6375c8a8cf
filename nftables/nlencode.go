//go:build linux

package nftables

import (
	"cmp"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/offheap"
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
// and the typed rules of per-service chains (rule.go), each written
// straight from its fields into the expressions nft 1.0.6 generates for
// its text (the implicit "meta l4proto" before a DNAT, byte-aligned
// prefixes loaded short, others masked, a one-element set turned into a
// plain match, a set of several prefixes into an anonymous interval set),
// into one reused scratch buffer, finished messages kept in shared arenas:
// no text is parsed back, no expression object is built. Anything else (a
// base chain, the table, a fixed chain's rule, which is nft text,
// prefixes nft would merge) makes the whole change set go through nft as
// before: errNotEncodable.

var errNotEncodable = errors.New("not encodable over netlink")

// nlEncoder builds the messages of one batch.
type nlEncoder struct {
	family byte // unix.NFPROTO_IPV4 or NFPROTO_IPV6
	table  string
	msgs   []netlink.Message
	setID  uint32
	w      attrWriter // scratch: the message being built
	arena  []byte     // where finished messages are kept
	// pool, when set, gives the arenas (off the Go heap: internal/offheap);
	// they are listed in arenas and go back once the batch is written
	// (encodedBatch.release). Without it arenas are heap slices.
	pool   *offheap.Pool
	arenas [][]byte
	// segs are the arenas filled before the current one; lastHdr is the
	// netlink header of the last message kept.
	segs    [][]byte
	lastHdr []byte
}

// newArenaPool is a Proxier's pool of arenas: the chunks of a cold start
// and every partial sync encode into the arenas of the batches written
// before them, mapped outside the Go heap (a cold start's chunk is tens of
// MiB, which as heap would count twice against the collector's goal and
// stay resident until two cycles after the sync), and trimmed to
// arenasKept resident ones after each sync. heap (SVCPROXY_NFTABLES_HEAP_BUFFERS=1)
// keeps them on the Go heap.
func newArenaPool(heap bool) *offheap.Pool {
	return offheap.New(arenaSize, arenasKept, heap)
}

// arenasKept is how many free arenas stay resident between syncs: a
// partial sync of a hundred services fits in them.
const arenasKept = 4

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
	msgs   []netlink.Message
	pool   *offheap.Pool
	arenas [][]byte // where msgs' data lives, from pool
	// wire is msgs in netlink's wire format, sequence numbers from 2 on
	// (the arenas themselves: the header of each message lies before its
	// Data); lastHdr is the last message's header, where the writer sets
	// the acknowledgement flag.
	wire    [][]byte
	lastHdr []byte
	err     error
}

// release gives b's arenas back to the pool: only once nothing refers to
// its messages any more (the writer returned, whatever it returned).
func (b *encodedBatch) release() {
	for _, a := range b.arenas {
		b.pool.Put(a)
	}
	b.arenas, b.msgs, b.wire, b.lastHdr = nil, nil, nil, nil
}

// encoded returns cs's netlink encoding: the one startEncode began, else
// one made now into pool's arenas.
func (cs *changeSet) encoded(pool *offheap.Pool, family byte) encodedBatch {
	if cs.encoding != nil {
		b := <-cs.encoding
		cs.encoding = nil
		return b
	}
	return encodePooled(pool, family, cs, nil)
}

// dropEncoding waits for the encoding startEncode began, if any, and
// gives its arenas back: the change set is not written over netlink (a
// sync that failed before it, or the writer switched off meanwhile).
func (cs *changeSet) dropEncoding() {
	if cs == nil || cs.encoding == nil {
		return
	}
	b := <-cs.encoding
	cs.encoding = nil
	b.release()
}

// encodePooled is encodeChangeSet into arenas of pool, its messages
// appended to msgs (an empty slice whose room may be taken, or nil).
func encodePooled(pool *offheap.Pool, family byte, cs *changeSet, msgs []netlink.Message) encodedBatch {
	e := newNLEncoder(family)
	e.pool = pool
	e.msgs = msgs
	scratch := messageScratch.Get().(*[]byte)
	e.w.b = (*scratch)[:0]
	msgs, err := e.changeSet(cs)
	*scratch = e.w.b[:0]
	messageScratch.Put(scratch)
	e.w.b = nil
	b := encodedBatch{msgs: msgs, pool: pool, arenas: e.arenas, wire: e.wireSegments(), lastHdr: e.lastHdr, err: err}
	if err != nil {
		b.release()
	}
	return b
}

// encodeChangeSet renders cs as render does, in the same order but for
// the added elements (grouped by container and endpoint map), into
// netlink messages; errNotEncodable when some object has a form the
// encoder does not know.
func encodeChangeSet(family byte, cs *changeSet) ([]netlink.Message, error) {
	return newNLEncoder(family).changeSet(cs)
}

func (e *nlEncoder) changeSet(cs *changeSet) ([]netlink.Message, error) {
	if cs.declare != nil || !cs.localhost.empty() {
		return nil, errNotEncodable
	}
	// About one message per operation but for the added elements, which
	// share one per container or endpoint map (more when a list is long:
	// append grows it then): sized once instead of grown by copies.
	e.msgs = slices.Grow(e.msgs[:0], cs.renderedOps()-len(cs.elemAdds)-cs.epAddN+int(numContainers)+numEndpointMaps)
	for _, n := range cs.deletes {
		e.chainMsg(unix.NFT_MSG_DELCHAIN, 0, n)
	}
	if len(cs.foreignDels) > 0 {
		return nil, errNotEncodable
	}
	if err := e.elements(unix.NFT_MSG_DELSETELEM, cs.elemDels, false); err != nil {
		return nil, err
	}
	if err := e.epElements(unix.NFT_MSG_DELSETELEM, cs.epDels, false); err != nil {
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
	var comment []byte // reused: one comment per rule
	for _, w := range cs.writes {
		for i := range w.spec.rules {
			comment = appendRuleComment(comment[:0], w.spec, i)
			if len(comment) > maxComment {
				return nil, errNotEncodable
			}
			if err := e.addRule(w.spec.name, &w.spec.rules[i], comment); err != nil {
				return nil, err
			}
		}
	}
	// The added elements grouped by container, the endpoint-map runs by
	// map (in place: the order of additions is free, and nothing else
	// reads cs meanwhile): a message per container or map instead of one
	// per service, about half a cold start's messages.
	slices.SortStableFunc(cs.elemAdds, func(a, b *elemSpec) int { return cmp.Compare(a.container, b.container) })
	if err := e.elements(unix.NFT_MSG_NEWSETELEM, cs.elemAdds, true); err != nil {
		return nil, err
	}
	slices.SortStableFunc(cs.epAdds, func(a, b []epElem) int { return cmp.Compare(a[0].m, b[0].m) })
	for i := 0; i < len(cs.epAdds); {
		j := i + 1
		for j < len(cs.epAdds) && cs.epAdds[j][0].m == cs.epAdds[i][0].m {
			j++
		}
		if err := e.epRuns(unix.NFT_MSG_NEWSETELEM, cs.epAdds[i:j], true); err != nil {
			return nil, err
		}
		i = j
	}
	if e.w.tooLong {
		return nil, errNotEncodable
	}
	return e.msgs, nil
}

func (e *nlEncoder) add(msgType uint16, flags netlink.HeaderFlags, attrs func(*attrWriter)) {
	w := &e.w
	// The netlink header first (filled below), so that the arenas hold the
	// batch in netlink's wire format: the writer sends them as they are
	// (wireSegments) instead of copying every message into one buffer.
	w.b = append(w.b[:0], make([]byte, unix.NLMSG_HDRLEN)...)
	w.b = append(w.b, e.family, unix.NFNETLINK_V0, 0, 0)
	attrs(w)
	for len(w.b)%4 != 0 {
		w.b = append(w.b, 0)
	}
	typ := netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | int(msgType))
	fl := netlink.Request | flags
	h := w.b[:unix.NLMSG_HDRLEN]
	binary.NativeEndian.PutUint32(h[0:], uint32(len(w.b)))
	binary.NativeEndian.PutUint16(h[4:], uint16(typ))
	binary.NativeEndian.PutUint16(h[6:], uint16(fl))
	// Sequence numbers as WriteBatch numbers them: the batch's begin is
	// 1, its messages 2 on, its end last.
	binary.NativeEndian.PutUint32(h[8:], uint32(len(e.msgs)+2))
	binary.NativeEndian.PutUint32(h[12:], 0) // port id
	m := e.keep(w.b)
	e.lastHdr = m[:unix.NLMSG_HDRLEN:unix.NLMSG_HDRLEN]
	e.msgs = append(e.msgs, netlink.Message{
		Header: netlink.Header{Type: typ, Flags: fl},
		Data:   m[unix.NLMSG_HDRLEN:],
	})
}

// keep copies a finished message into the batch's arena: the messages of
// a batch share a few large buffers instead of one allocation each (plus
// the copies an attribute encoder makes), and the scratch buffer they are
// built in is reused from message to message.
func (e *nlEncoder) keep(b []byte) []byte {
	if cap(e.arena)-len(e.arena) < len(b) {
		if len(e.arena) > 0 {
			e.segs = append(e.segs, e.arena)
		}
		if e.pool != nil && len(b) <= arenaSize {
			a := e.pool.Get()
			e.arenas = append(e.arenas, a)
			e.arena = a
		} else {
			e.arena = make([]byte, 0, max(len(b), arenaSize))
		}
	}
	off := len(e.arena)
	e.arena = append(e.arena, b...)
	return e.arena[off:len(e.arena):len(e.arena)]
}

// wireSegments returns the arenas holding the encoded messages, each in
// netlink's wire format (header, padded data), in order: their
// concatenation between a batch begin and end is the batch nft would
// send, but for the acknowledgement flag of the last message (the
// writer's; see lastHdr).
func (e *nlEncoder) wireSegments() [][]byte {
	if len(e.arena) == 0 {
		return e.segs
	}
	return append(e.segs, e.arena)
}

const arenaSize = 256 << 10

// messageScratch holds the buffers messages are built in before they are
// copied into the arenas: an element list fills one to about 64 KiB, which
// every chunk's encoder grew to by doubling.
var messageScratch = sync.Pool{New: func() any { b := make([]byte, 0, maxElemList+4096); return &b }}

// attrWriter appends netlink attributes (netfilter's integers big endian,
// each attribute padded to four bytes) to a buffer, as
// netlink.AttributeEncoder encodes them, without its per-attribute
// allocations.
type attrWriter struct {
	b []byte
	// tooLong: an attribute ended longer than its 16-bit length can say
	// (the encoding is refused: errNotEncodable, so nft writes it).
	tooLong bool
}

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
	if len(w.b)-start > 0xffff {
		w.tooLong = true
	}
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
func (e *nlEncoder) elements(msgType uint16, elems []*elemSpec, add bool) error {
	for i := 0; i < len(elems); {
		j := i
		for ; j < len(elems) && elems[j].container == elems[i].container; j++ {
			if err := e.checkElement(elems[j], add); err != nil {
				return err
			}
		}
		run := elems[i:j]
		e.elementList(msgType, add, elems[i].container.name(), 0, len(run), func(ae *attrWriter, k int) {
			e.element(ae, run[k], add)
		})
		i = j
	}
	return nil
}

// maxElemList bounds the bytes of one message's element list: a netlink
// attribute's length is 16 bits, and an element takes at most a few
// hundred bytes (a key, a 128-byte comment, a 256-byte chain name), so a
// list is closed once it passes this and the rest go in another message.
// (A service's 4,096 endpoint-map elements take about 130 KiB.)
const maxElemList = 0xffff - 2048

// elementList adds messages adding (add) or deleting n elements of the
// named set or map (of the set with ID id, when not 0), element k written
// by elem: one message, or as many as the lists' size needs.
func (e *nlEncoder) elementList(msgType uint16, add bool, name string, id uint32, n int, elem func(ae *attrWriter, k int)) {
	flags := netlink.HeaderFlags(0)
	if add {
		flags = netlink.Create
	}
	for k := 0; k < n || (n == 0 && k == 0); {
		e.add(msgType, flags, func(ae *attrWriter) {
			ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, e.table)
			ae.String(unix.NFTA_SET_ELEM_LIST_SET, name)
			if id != 0 {
				ae.Uint32(unix.NFTA_SET_ELEM_LIST_SET_ID, id)
			}
			list := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_LIST_ELEMENTS)
			for ; k < n && len(ae.b)-list < maxElemList; k++ {
				el := ae.begin(unix.NLA_F_NESTED | unix.NFTA_LIST_ELEM)
				elem(ae, k)
				ae.end(el)
			}
			ae.end(list)
		})
		if n == 0 {
			break
		}
	}
}

// checkElement reports an element element cannot encode, before any of
// its run is written: an address of the other family or with a zone, a
// value of a form the engine never writes, a comment too long.
func (e *nlEncoder) checkElement(el *elemSpec, add bool) error {
	switch el.container.layout() {
	case layoutAddr, layoutAddrProtoPort:
		if !e.keyAddr(el.key.addr) {
			return errNotEncodable
		}
	case layoutHairpin:
		if !e.keyAddr(el.key.addr) {
			return errNotEncodable
		}
	}
	if !add {
		return nil
	}
	if !el.container.isSet() {
		if _, ok := el.value.code(); !ok {
			return errNotEncodable
		}
	}
	if len(el.comment) > maxComment {
		return errNotEncodable
	}
	return nil
}

// keyAddr: a is an address of the encoder's family, without a zone.
func (e *nlEncoder) keyAddr(a netip.Addr) bool {
	return a.IsValid() && a.Is4() == (e.ipLen() == 4) && a.Zone() == ""
}

// element writes one element checkElement accepted.
func (e *nlEncoder) element(ae *attrWriter, el *elemSpec, add bool) {
	k := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY)
	v := ae.begin(unix.NFTA_DATA_VALUE)
	ae.b = e.appendKey(ae.b, el.container.layout(), &el.key)
	ae.end(v)
	ae.end(k)
	if !add {
		return
	}
	if !el.container.isSet() {
		code, _ := el.value.code()
		d := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_DATA)
		vd := ae.begin(unix.NLA_F_NESTED | unix.NFTA_DATA_VERDICT)
		ae.Uint32(unix.NFTA_VERDICT_CODE, uint32(code))
		if el.value.kind == verdictGoto || el.value.kind == verdictJump {
			ae.String(unix.NFTA_VERDICT_CHAIN, el.value.chain)
		}
		ae.end(vd)
		ae.end(d)
	}
	if el.comment != "" {
		s := ae.begin(unix.NFTA_SET_ELEM_USERDATA)
		ae.b = appendUserdataComment(ae.b, el.comment)
		ae.end(s)
	}
}

// appendKey appends a (concatenated) key of the engine's containers:
// addresses, protocols (one byte) and ports (two, big endian), each field
// padded to four bytes.
func (e *nlEncoder) appendKey(b []byte, l keyLayout, k *elemKey) []byte {
	addr := e.appendAddr
	switch l {
	case layoutAddr:
		return addr(b, k.addr)
	case layoutHairpin:
		b = addr(addr(b, k.addr), k.addr) // source and destination alike
	case layoutAddrProtoPort:
		b = addr(b, k.addr)
	}
	return append(b, k.proto, 0, 0, 0, byte(k.port>>8), byte(k.port), 0, 0)
}

// epElements adds or deletes endpoint maps' elements, one message per
// run of one map: the key is numgen's value (a 32-bit integer in host
// byte order), the value the address and the port (big endian, padded
// to 4 bytes).
func (e *nlEncoder) epElements(msgType uint16, elems []epElem, add bool) error {
	for i := 0; i < len(elems); {
		j := i
		for j < len(elems) && elems[j].m == elems[i].m {
			j++
		}
		if err := e.epRuns(msgType, [][]epElem{elems[i:j]}, add); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// epRuns adds or deletes the elements of runs, all of one endpoint map,
// in one message (or as many as the list's size needs).
func (e *nlEncoder) epRuns(msgType uint16, runs [][]epElem, add bool) error {
	n := 0
	for _, run := range runs {
		for i := range run {
			if add && run[i].ep.v6 != (e.ipLen() == 16) {
				return errNotEncodable
			}
		}
		n += len(run)
	}
	r, i := 0, 0 // the next element: runs[r][i]
	e.elementList(msgType, add, runs[0][0].ctr().name(), 0, n, func(ae *attrWriter, _ int) {
		for i == len(runs[r]) {
			r, i = r+1, 0
		}
		el := &runs[r][i]
		i++
		key := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_KEY)
		v := ae.begin(unix.NFTA_DATA_VALUE)
		ae.b = binary.NativeEndian.AppendUint32(ae.b, el.idx)
		ae.end(v)
		ae.end(key)
		if add {
			d := ae.begin(unix.NLA_F_NESTED | unix.NFTA_SET_ELEM_DATA)
			v := ae.begin(unix.NFTA_DATA_VALUE)
			ae.b = append(ae.b, el.ep.addr[:e.ipLen()]...)
			ae.b = append(ae.b, byte(el.ep.port>>8), byte(el.ep.port), 0, 0)
			ae.end(v)
			ae.end(d)
		}
	})
	return nil
}

// appendAddr appends a, 4 or 16 bytes by the encoder's family.
func (e *nlEncoder) appendAddr(b []byte, a netip.Addr) []byte {
	if e.ipLen() == 4 {
		a4 := a.As4()
		return append(b, a4[:]...)
	}
	a16 := a.As16()
	return append(b, a16[:]...)
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

// Netfilter's verdicts NF_DROP and NF_ACCEPT.
const (
	nfDrop   = 0
	nfAccept = 1
)

// Registers as nft allocates them: the verdict register and the first
// 16-byte data registers.
const (
	regVerdict = 0
	reg1       = 1
	reg2       = 2
)

// checkPrefix returns pfx masked when the encoder can match it: of the
// encoder's family, without a zone, not of length zero (nft drops that
// match).
func (e *nlEncoder) checkPrefix(pfx netip.Prefix) (netip.Prefix, error) {
	if !pfx.IsValid() || pfx.Addr().BitLen() != e.ipLen()*8 || pfx.Addr().Zone() != "" || pfx.Bits() == 0 {
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
func (e *nlEncoder) anonymousPrefixSet(pfxs []netip.Prefix) (uint32, error) {
	type span struct{ start, next netip.Addr }
	var spans []span
	for _, pfx := range pfxs {
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
	e.elementList(unix.NFT_MSG_NEWSETELEM, true, anonymousSetName, id, len(out), func(ae *attrWriter, k int) {
		if out[k].end {
			ae.b = append(ae.b, nlattr(unix.NFTA_SET_ELEM_FLAGS, binary.BigEndian.AppendUint32(nil, unix.NFT_SET_ELEM_INTERVAL_END))...)
		}
		ae.b = append(ae.b, nlattr(unix.NLA_F_NESTED|unix.NFTA_SET_ELEM_KEY, nlattr(unix.NFTA_DATA_VALUE, out[k].key))...)
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

// addRule adds r to chain: its expressions, written straight into the
// message as nft 1.0.6 generates them for r's text (the implicit "meta
// l4proto" before a DNAT, byte-aligned prefixes loaded short, others
// masked, a one-element set turned into a plain match, a set of several
// prefixes into an anonymous interval set, added first). A fixed chain's
// rule (nft text) and forms nft would write otherwise are
// errNotEncodable.
func (e *nlEncoder) addRule(chain string, r *ruleSpec, comment []byte) error {
	if err := e.checkRule(r); err != nil {
		return err
	}
	var setID uint32
	if r.match == matchSaddrNotIn && len(r.notIn().prefixes)+len(r.notIn().addrs) > 1 {
		id, err := e.anonymousPrefixSet(e.notInPrefixes(r.notIn()))
		if err != nil {
			return err
		}
		setID = id
	}
	e.add(unix.NFT_MSG_NEWRULE, netlink.Create|netlink.Append, func(w *attrWriter) {
		w.String(unix.NFTA_RULE_TABLE, e.table)
		w.String(unix.NFTA_RULE_CHAIN, chain)
		s := w.begin(unix.NFTA_RULE_EXPRESSIONS | unix.NLA_F_NESTED)
		e.ruleExprs(w, r, setID)
		w.end(s)
		if len(comment) > 0 {
			s := w.begin(unix.NFTA_RULE_USERDATA)
			w.b = append(w.b, 0, byte(len(comment)+1))
			w.b = append(append(w.b, comment...), 0)
			w.end(s)
		}
	})
	return nil
}

// notInPrefixes are the prefixes of a matchSaddrNotIn (checked by
// checkRule), its addresses as full-length prefixes.
func (e *nlEncoder) notInPrefixes(l *addrList) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(l.prefixes)+len(l.addrs))
	for _, p := range l.prefixes {
		p, _ = e.checkPrefix(p)
		out = append(out, p)
	}
	for _, a := range l.addrs {
		p, _ := e.checkPrefix(netip.PrefixFrom(a, a.BitLen()))
		out = append(out, p)
	}
	return out
}

// checkRule reports a rule addRule cannot encode, before anything of it
// is written.
func (e *nlEncoder) checkRule(r *ruleSpec) error {
	if r.stmt == 0 {
		return errNotEncodable // a fixed chain's rule, nft text
	}
	famOK := r.v6 == (e.ipLen() == 16)
	switch r.match {
	case matchNone, matchFibLocal:
	case matchSaddrSet:
		if !famOK {
			return errNotEncodable
		}
	case matchSaddr:
		if _, err := e.checkPrefix(netip.PrefixFrom(r.addr, int(r.bits))); err != nil || !famOK {
			return errNotEncodable
		}
	case matchIifname:
		name, _ := strings.CutSuffix(r.set(), "*")
		if name == "" || strings.ContainsAny(name, "\"\\ *") || len(r.set()) >= unix.IFNAMSIZ {
			return errNotEncodable
		}
	case matchSaddrNotIn:
		if !famOK || r.notIn() == nil || len(r.notIn().prefixes)+len(r.notIn().addrs) == 0 {
			return errNotEncodable
		}
		for _, p := range r.notIn().prefixes {
			if _, err := e.checkPrefix(p); err != nil {
				return err
			}
		}
		for _, a := range r.notIn().addrs {
			if _, err := e.checkPrefix(netip.PrefixFrom(a, a.BitLen())); err != nil {
				return err
			}
		}
	default:
		return errNotEncodable
	}
	switch r.stmt {
	case stmtGoto:
		if r.chain() == "" {
			return errNotEncodable
		}
	case stmtDrop, stmtMarkOr:
	case stmtUpdate:
		if !famOK || r.set() == "" {
			return errNotEncodable
		}
	case stmtDNAT:
		switch r.proto {
		case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP:
		default:
			return errNotEncodable
		}
		if !r.addr.IsValid() ||
			r.addr.BitLen() != e.ipLen()*8 || r.addr.Zone() != "" || r.port == 0 {
			return errNotEncodable
		}
	case stmtDNATMap:
		switch r.proto {
		case unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP:
		default:
			return errNotEncodable
		}
		if !famOK || r.numgen < 2 || r.numgen > maxMapEndpoints || int(r.bits) >= numEndpointMaps {
			return errNotEncodable
		}
	default:
		return errNotEncodable
	}
	return nil
}

// saddrOffset is where the source address sits in the network header.
func (e *nlEncoder) saddrOffset() uint32 {
	if e.ipLen() == 16 {
		return 8
	}
	return 12
}

// ruleExprs writes the expressions of a rule checkRule accepted.
func (e *nlEncoder) ruleExprs(w *attrWriter, r *ruleSpec, setID uint32) {
	var scratch [16]byte
	if r.numgen > 0 && r.stmt != stmtDNATMap {
		exprNumgen(w, reg1, r.numgen, 0)
		exprCmp(w, unix.NFT_CMP_EQ, binary.NativeEndian.AppendUint32(scratch[:0], 0))
	}
	ipLen := uint32(e.ipLen())
	switch r.match {
	case matchSaddrSet:
		exprPayload(w, unix.NFT_PAYLOAD_NETWORK_HEADER, e.saddrOffset(), ipLen)
		exprLookup(w, r.set(), 0, false)
	case matchSaddr:
		e.prefixMatch(w, unix.NFT_CMP_EQ, netip.PrefixFrom(r.addr, int(r.bits)))
	case matchIifname:
		exprMeta(w, unix.NFT_META_IIFNAME, false)
		if name, ok := strings.CutSuffix(r.set(), "*"); ok {
			exprCmp(w, unix.NFT_CMP_EQ, append(scratch[:0], name...))
		} else {
			var b [unix.IFNAMSIZ]byte
			copy(b[:], name)
			exprCmp(w, unix.NFT_CMP_EQ, b[:])
		}
	case matchFibLocal:
		exprFibSaddrType(w)
		exprCmp(w, unix.NFT_CMP_EQ, binary.NativeEndian.AppendUint32(scratch[:0], unix.RTN_LOCAL))
	case matchSaddrNotIn:
		if setID != 0 {
			exprPayload(w, unix.NFT_PAYLOAD_NETWORK_HEADER, e.saddrOffset(), ipLen)
			exprLookup(w, anonymousSetName, setID, true)
			break
		}
		// One element: nft makes it a plain match.
		e.prefixMatch(w, unix.NFT_CMP_NEQ, e.notInPrefixes(r.notIn())[0])
	}
	switch r.stmt {
	case stmtGoto:
		exprVerdict(w, unix.NFT_GOTO, r.chain())
	case stmtDrop:
		exprVerdict(w, nfDrop, "")
	case stmtDNAT:
		// "meta l4proto P" (nft's dependency of the port), then the
		// address and port in registers 1 and 2.
		exprMeta(w, unix.NFT_META_L4PROTO, false)
		exprCmp(w, unix.NFT_CMP_EQ, []byte{r.proto})
		a := r.addr.As16()
		if r.addr.Is4() {
			exprImmediate(w, reg1, a[12:])
		} else {
			exprImmediate(w, reg1, a[:])
		}
		exprImmediate(w, reg2, []byte{byte(r.port >> 8), byte(r.port)})
		exprDNAT(w, e.family, reg2)
	case stmtDNATMap:
		// The numgen value looked up in the map, its value (address, then
		// port) loaded from register 1 on: the port lands in the 32-bit
		// register after the address (NFT_REG32_01 after an IPv4 address,
		// NFT_REG_2 after an IPv6 one), as nft writes it.
		exprMeta(w, unix.NFT_META_L4PROTO, false)
		exprCmp(w, unix.NFT_CMP_EQ, []byte{r.proto})
		exprNumgen(w, reg1, r.numgen, r.mark)
		s := exprBegin(w, "lookup")
		w.Uint32(unix.NFTA_LOOKUP_SREG, reg1)
		w.Uint32(unix.NFTA_LOOKUP_DREG, reg1)
		w.String(unix.NFTA_LOOKUP_SET, endpointMap(r.bits))
		w.Uint32(unix.NFTA_LOOKUP_SET_ID, 0)
		exprEnd(w, s)
		portReg := uint32(unix.NFT_REG32_01)
		if e.ipLen() == 16 {
			portReg = reg2
		}
		// (The kernel adds NF_NAT_RANGE_MAP_IPS itself for an address
		// register, so nft's listing shows flags 0x3 either way.)
		exprDNAT(w, e.family, portReg)
	case stmtMarkOr:
		// load, (mark & ^M) ^ M, store; the mark is a host-order 32-bit
		// value.
		exprMeta(w, unix.NFT_META_MARK, false)
		s := exprBegin(w, "bitwise")
		w.Uint32(unix.NFTA_BITWISE_SREG, reg1)
		w.Uint32(unix.NFTA_BITWISE_DREG, reg1)
		w.Uint32(unix.NFTA_BITWISE_LEN, 4)
		dataValue(w, unix.NLA_F_NESTED|unix.NFTA_BITWISE_MASK, binary.NativeEndian.AppendUint32(scratch[:0], ^r.mark))
		dataValue(w, unix.NLA_F_NESTED|unix.NFTA_BITWISE_XOR, binary.NativeEndian.AppendUint32(scratch[:0], r.mark))
		exprEnd(w, s)
		exprMeta(w, unix.NFT_META_MARK, true)
	case stmtUpdate:
		exprPayload(w, unix.NFT_PAYLOAD_NETWORK_HEADER, e.saddrOffset(), ipLen)
		s := exprBegin(w, "dynset")
		w.Uint32(unix.NFTA_DYNSET_SREG_KEY, reg1)
		w.Uint32(unix.NFTA_DYNSET_OP, unix.NFT_DYNSET_OP_UPDATE)
		w.String(unix.NFTA_DYNSET_SET_NAME, r.set())
		w.Uint32(unix.NFTA_DYNSET_SET_ID, 0)
		w.Uint32(unix.NFTA_DYNSET_FLAGS, 0)
		exprEnd(w, s)
	}
}

// prefixMatch compares the source address with pfx (checked): nft loads
// a byte-aligned prefix short and compares it; any other prefix it loads
// whole and masks.
func (e *nlEncoder) prefixMatch(w *attrWriter, op uint32, pfx netip.Prefix) {
	pfx = pfx.Masked()
	full := e.ipLen()
	a16 := pfx.Addr().As16()
	addr := a16[16-full:]
	bits := pfx.Bits()
	if bits%8 == 0 {
		exprPayload(w, unix.NFT_PAYLOAD_NETWORK_HEADER, e.saddrOffset(), uint32(bits/8))
		exprCmp(w, op, addr[:bits/8])
		return
	}
	exprPayload(w, unix.NFT_PAYLOAD_NETWORK_HEADER, e.saddrOffset(), uint32(full))
	var mask, xor [16]byte
	for i := 0; i < bits/8; i++ {
		mask[i] = 0xff
	}
	mask[bits/8] = byte(0xff << (8 - bits%8))
	s := exprBegin(w, "bitwise")
	w.Uint32(unix.NFTA_BITWISE_SREG, reg1)
	w.Uint32(unix.NFTA_BITWISE_DREG, reg1)
	w.Uint32(unix.NFTA_BITWISE_LEN, uint32(full))
	dataValue(w, unix.NLA_F_NESTED|unix.NFTA_BITWISE_MASK, mask[:full])
	dataValue(w, unix.NLA_F_NESTED|unix.NFTA_BITWISE_XOR, xor[:full])
	exprEnd(w, s)
	exprCmp(w, op, addr)
}

// The expressions, laid out as google/nftables' expr package marshals
// them (the layout nft's own messages have): each a list element holding
// its name and its nested attributes, integers big endian.

func exprBegin(w *attrWriter, name string) (start int) {
	start = w.begin(unix.NFTA_LIST_ELEM | unix.NLA_F_NESTED)
	w.String(unix.NFTA_EXPR_NAME, name)
	w.begin(unix.NFTA_EXPR_DATA | unix.NLA_F_NESTED)
	return start
}

// exprEnd closes the expression's data (which begins 4 bytes after the
// name attribute) and the list element.
func exprEnd(w *attrWriter, start int) {
	nameLen := int(binary.NativeEndian.Uint16(w.b[start+4:]))
	w.end(start + 4 + (nameLen+3)&^3)
	w.end(start)
}

// dataValue writes attribute typ holding NFTA_DATA_VALUE v.
func dataValue(w *attrWriter, typ uint16, v []byte) {
	s := w.begin(typ)
	w.Bytes(unix.NFTA_DATA_VALUE, v)
	w.end(s)
}

// exprMeta loads meta key into register 1 (store: sets it from
// register 1).
func exprMeta(w *attrWriter, key uint32, store bool) {
	s := exprBegin(w, "meta")
	w.Uint32(unix.NFTA_META_KEY, key)
	if store {
		w.Uint32(unix.NFTA_META_SREG, reg1)
	} else {
		w.Uint32(unix.NFTA_META_DREG, reg1)
	}
	exprEnd(w, s)
}

// exprCmp compares register 1 with data.
func exprCmp(w *attrWriter, op uint32, data []byte) {
	s := exprBegin(w, "cmp")
	w.Uint32(unix.NFTA_CMP_SREG, reg1)
	w.Uint32(unix.NFTA_CMP_OP, op)
	dataValue(w, unix.NLA_F_NESTED|unix.NFTA_CMP_DATA, data)
	exprEnd(w, s)
}

// exprPayload loads len bytes at offset of base into register 1.
func exprPayload(w *attrWriter, base, offset, length uint32) {
	s := exprBegin(w, "payload")
	w.Uint32(unix.NFTA_PAYLOAD_DREG, reg1)
	w.Uint32(unix.NFTA_PAYLOAD_BASE, base)
	w.Uint32(unix.NFTA_PAYLOAD_OFFSET, offset)
	w.Uint32(unix.NFTA_PAYLOAD_LEN, length)
	exprEnd(w, s)
}

// exprLookup looks register 1 up in set (by id when the set is one of
// the batch's anonymous sets).
func exprLookup(w *attrWriter, set string, id uint32, invert bool) {
	s := exprBegin(w, "lookup")
	w.Uint32(unix.NFTA_LOOKUP_SREG, reg1)
	if invert {
		w.Uint32(unix.NFTA_LOOKUP_FLAGS, unix.NFT_LOOKUP_F_INV)
	}
	w.String(unix.NFTA_LOOKUP_SET, set)
	w.Uint32(unix.NFTA_LOOKUP_SET_ID, id)
	exprEnd(w, s)
}

// exprNumgen: a random number below mod, plus offset, in register reg.
func exprNumgen(w *attrWriter, reg, mod, offset uint32) {
	s := exprBegin(w, "numgen")
	w.Uint32(unix.NFTA_NG_DREG, reg)
	w.Uint32(unix.NFTA_NG_MODULUS, mod)
	w.Uint32(unix.NFTA_NG_TYPE, unix.NFT_NG_RANDOM)
	w.Uint32(unix.NFTA_NG_OFFSET, offset)
	exprEnd(w, s)
}

// exprFibSaddrType: the address type of the source address in register 1.
func exprFibSaddrType(w *attrWriter) {
	s := exprBegin(w, "fib")
	w.Uint32(unix.NFTA_FIB_DREG, reg1)
	w.Uint32(unix.NFTA_FIB_FLAGS, unix.NFTA_FIB_F_SADDR)
	w.Uint32(unix.NFTA_FIB_RESULT, unix.NFT_FIB_RESULT_ADDRTYPE)
	exprEnd(w, s)
}

func exprImmediate(w *attrWriter, reg uint32, data []byte) {
	s := exprBegin(w, "immediate")
	w.Uint32(unix.NFTA_IMMEDIATE_DREG, reg)
	dataValue(w, unix.NLA_F_NESTED|unix.NFTA_IMMEDIATE_DATA, data)
	exprEnd(w, s)
}

// exprDNAT: destination NAT to the address in register 1 and the port
// in register portReg.
func exprDNAT(w *attrWriter, family byte, portReg uint32) {
	s := exprBegin(w, "nat")
	w.Uint32(unix.NFTA_NAT_TYPE, unix.NFT_NAT_DNAT)
	w.Uint32(unix.NFTA_NAT_FAMILY, uint32(family))
	w.Uint32(unix.NFTA_NAT_REG_ADDR_MIN, reg1)
	w.Uint32(unix.NFTA_NAT_REG_ADDR_MAX, reg1)
	w.Uint32(unix.NFTA_NAT_REG_PROTO_MIN, portReg)
	w.Uint32(unix.NFTA_NAT_REG_PROTO_MAX, portReg)
	w.Uint32(unix.NFTA_NAT_FLAGS, unix.NF_NAT_RANGE_PROTO_SPECIFIED)
	exprEnd(w, s)
}

// exprVerdict: the verdict (and its chain) as an immediate to the
// verdict register.
func exprVerdict(w *attrWriter, code int32, chain string) {
	s := exprBegin(w, "immediate")
	w.Uint32(unix.NFTA_IMMEDIATE_DREG, regVerdict)
	d := w.begin(unix.NLA_F_NESTED | unix.NFTA_IMMEDIATE_DATA)
	v := w.begin(unix.NLA_F_NESTED | unix.NFTA_DATA_VERDICT)
	w.Uint32(unix.NFTA_VERDICT_CODE, uint32(code))
	if chain != "" {
		w.String(unix.NFTA_VERDICT_CHAIN, chain)
	}
	w.end(v)
	w.end(d)
	exprEnd(w, s)
}
