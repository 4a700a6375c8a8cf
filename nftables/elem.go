//go:build linux

package nftables

import (
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Set and map elements, typed. The planner writes each element of the
// engine's sets and maps as a container (which set or map), a key (the
// fields of the container's key type: addresses, protocol, port) and a
// verdict (a map's value). The diff, the recorded state and the netlink
// encoder work on these values; nft text is rendered from them only for
// nft (the dry run, the nft path), and a listing read through nft is
// parsed into them once.

// container is one of the sets and maps whose elements the engine owns, in
// the order full syncs list them.
type container uint8

const (
	ctrClusterIPs container = iota
	ctrNodePortIPs
	ctrHairpin
	ctrServiceIPs
	ctrServiceNodePorts
	ctrNoEndpointServices
	ctrNoEndpointNodePorts
	ctrFirewallIPs
	// ctrLocalhostNodePortReject exists only with
	// Config.LocalhostNodePorts (plan_localhost.go).
	ctrLocalhostNodePortReject
	// ctrEndpoints is the first of the numEndpointMaps data maps
	// service-endpoints-NN (endpoint_maps.go): a policy chain's
	// endpoints under the keys its "numgen random mod N offset K" rule
	// draws, each key's value an address and port.
	ctrEndpoints
)

// numContainers counts the containers, the endpoint maps included.
const numContainers = ctrEndpoints + numEndpointMaps

var containerNames = func() (n [numContainers]string) {
	copy(n[:], []string{
		ctrClusterIPs:              setClusterIPs,
		ctrNodePortIPs:             setNodePortIPs,
		ctrHairpin:                 setHairpin,
		ctrServiceIPs:              mapServiceIPs,
		ctrServiceNodePorts:        mapServiceNodePorts,
		ctrNoEndpointServices:      mapNoEndpointServices,
		ctrNoEndpointNodePorts:     mapNoEndpointNodePorts,
		ctrFirewallIPs:             mapFirewallIPs,
		ctrLocalhostNodePortReject: mapLocalhostNodePortReject,
	})
	for i := range numEndpointMaps {
		n[ctrEndpoints+container(i)] = endpointMapName(i)
	}
	return n
}()

// optional: the table is declared without it (the localhost node-port
// reject map exists only with Config.LocalhostNodePorts).
func (c container) optional() bool { return c == ctrLocalhostNodePortReject }

// name is the container's set or map name (upstream's).
func (c container) name() string { return containerNames[c] }

// isData: a data map (an endpoint map, whose elements are epElems: a
// numgen value and an address and port), neither a set nor a verdict map.
func (c container) isData() bool { return c >= ctrEndpoints }

// isSet: a set (elements without a value), not a verdict map.
func (c container) isSet() bool {
	return c == ctrClusterIPs || c == ctrNodePortIPs || c == ctrHairpin
}

// keyLayout is the shape of a container's key type.
type keyLayout uint8

const (
	layoutAddr          keyLayout = iota // ipv4_addr
	layoutAddrProtoPort                  // ipv4_addr . inet_proto . inet_service
	layoutProtoPort                      // inet_proto . inet_service
	layoutHairpin                        // ipv4_addr . ipv4_addr . inet_proto . inet_service
	// layoutIndex is an endpoint map's: a 32-bit integer key (the
	// numgen value), the value ipv4_addr . inet_service. Its elements are
	// epElems (endpoint_maps.go), never parsed or encoded as elemKeys.
	layoutIndex
)

func (c container) layout() keyLayout {
	if c.isData() {
		return layoutIndex
	}
	return layoutOf(c.name())
}

// layoutOf is the key layout of the named set or map (any other name is
// taken as address . protocol . port).
func layoutOf(name string) keyLayout {
	switch name {
	case setClusterIPs, setNodePortIPs:
		return layoutAddr
	case mapServiceNodePorts, mapNoEndpointNodePorts, mapLocalhostNodePortReject:
		return layoutProtoPort
	case setHairpin:
		return layoutHairpin
	}
	return layoutAddrProtoPort
}

// fields is how many " . "-joined fields the layout's key has.
func (l keyLayout) fields() int {
	switch l {
	case layoutAddr:
		return 1
	case layoutProtoPort:
		return 2
	case layoutHairpin:
		return 4
	}
	return 3
}

// elemKey is an element's key: the fields of its container's layout, the
// others zero (the endpoint maps' elements are epElems, not elemKeys).
// Comparable, so the state and the diff key maps by it.
// hairpin-connections' key holds one address, its source and destination
// alike (an endpoint reaching itself): a listed key whose two addresses
// differ is foreign (never written by the engine, deleted by its text).
type elemKey struct {
	addr  netip.Addr
	port  uint16
	proto uint8 // unix.IPPROTO_*
}

// compare orders keys (deterministic transactions).
func (k elemKey) compare(o elemKey) int {
	if c := k.addr.Compare(o.addr); c != 0 {
		return c
	}
	if k.proto != o.proto {
		return int(k.proto) - int(o.proto)
	}
	return int(k.port) - int(o.port)
}

func addrKey(a netip.Addr) elemKey { return elemKey{addr: a} }

func addrProtoPortKey(a netip.Addr, proto uint8, port uint16) elemKey {
	return elemKey{addr: a, proto: proto, port: port}
}

func protoPortKey(proto uint8, port uint16) elemKey { return elemKey{proto: proto, port: port} }

// hairpinKey is an endpoint reaching itself: source and destination the
// endpoint's address.
func hairpinKey(a netip.Addr, proto uint8, port uint16) elemKey {
	return elemKey{addr: a, proto: proto, port: port}
}

// textFields renders k as nft writes its key, one string per field.
func (k elemKey) textFields(l keyLayout) []string {
	switch l {
	case layoutAddr:
		return []string{k.addr.String()}
	case layoutProtoPort:
		return []string{protoName(k.proto), strconv.Itoa(int(k.port))}
	case layoutHairpin:
		a := k.addr.String()
		return []string{a, a, protoName(k.proto), strconv.Itoa(int(k.port))}
	}
	return []string{k.addr.String(), protoName(k.proto), strconv.Itoa(int(k.port))}
}

// text is k as nft writes it ("10.96.0.1 . tcp . 80").
func (k elemKey) text(l keyLayout) string { return strings.Join(k.textFields(l), " . ") }

// parseElemKey reads a key nft wrote (one string per field); ok false for
// a form the engine never writes (a protocol nft names other than tcp,
// udp and sctp, say).
func parseElemKey(l keyLayout, fields []string) (k elemKey, ok bool) {
	if len(fields) != l.fields() {
		return k, false
	}
	addr := func(s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(s)
		return a, err == nil
	}
	protoPort := func(f []string) bool {
		var ok bool
		if k.proto, ok = parseProto(f[0]); !ok {
			return false
		}
		p, err := strconv.ParseUint(f[1], 10, 16)
		k.port = uint16(p)
		return err == nil
	}
	switch l {
	case layoutAddr:
		k.addr, ok = addr(fields[0])
		return k, ok
	case layoutProtoPort:
		return k, protoPort(fields)
	case layoutHairpin:
		if k.addr, ok = addr(fields[0]); !ok {
			return k, false
		}
		if a2, ok := addr(fields[1]); !ok || a2 != k.addr {
			return k, false
		}
		return k, protoPort(fields[2:])
	}
	if k.addr, ok = addr(fields[0]); !ok {
		return k, false
	}
	return k, protoPort(fields[1:])
}

// parseProto reads a protocol as protoName writes it.
func parseProto(s string) (uint8, bool) {
	if p, ok := protoNumber(s); ok {
		return p, true
	}
	n, err := strconv.ParseUint(s, 10, 8)
	return uint8(n), err == nil
}

// verdictKind is what a verdict map's element does.
type verdictKind uint8

const (
	verdictNone   verdictKind = iota // a set's element: no value
	verdictDrop                      // drop
	verdictAccept                    // accept
	verdictReturn                    // return
	verdictGoto                      // goto chain
	verdictJump                      // jump chain
	// verdictOther is a listed value of a form the engine never writes,
	// kept as its text (in chain) so that it differs from every planned
	// one.
	verdictOther
)

// verdict is a verdict map's value (the zero verdict: a set's element).
type verdict struct {
	kind  verdictKind
	chain string // goto's and jump's target; verdictOther's text
}

func gotoVerdict(chain string) verdict { return verdict{kind: verdictGoto, chain: chain} }

// String is v as nft writes it ("goto service-…", "drop"; "" for none).
func (v verdict) String() string {
	switch v.kind {
	case verdictDrop:
		return "drop"
	case verdictAccept:
		return "accept"
	case verdictReturn:
		return "return"
	case verdictGoto:
		return "goto " + v.chain
	case verdictJump:
		return "jump " + v.chain
	case verdictOther:
		return v.chain
	}
	return ""
}

// parseVerdictText reads a value nft wrote; a form the engine never
// writes, or not as String writes it, is verdictOther.
func parseVerdictText(text string) verdict {
	if v := parseVerdictForm(text); v.String() == text {
		return v
	}
	return verdict{kind: verdictOther, chain: text}
}

func parseVerdictForm(text string) verdict {
	switch verb, arg, two := strings.Cut(text, " "); {
	case text == "":
		return verdict{}
	case two && verb == "goto" && arg != "" && !strings.Contains(arg, " "):
		return verdict{kind: verdictGoto, chain: arg}
	case two && verb == "jump" && arg != "" && !strings.Contains(arg, " "):
		return verdict{kind: verdictJump, chain: arg}
	case two:
	case verb == "drop":
		return verdict{kind: verdictDrop}
	case verb == "accept":
		return verdict{kind: verdictAccept}
	case verb == "return":
		return verdict{kind: verdictReturn}
	}
	return verdict{kind: verdictOther, chain: text}
}

// code is v's netfilter verdict code; ok false for none and other.
func (v verdict) code() (int32, bool) {
	switch v.kind {
	case verdictDrop:
		return nfDrop, true
	case verdictAccept:
		return nfAccept, true
	case verdictReturn:
		return unix.NFT_RETURN, true
	case verdictGoto:
		return unix.NFT_GOTO, v.chain != ""
	case verdictJump:
		return unix.NFT_JUMP, v.chain != ""
	}
	return 0, false
}

// verdictFromCode is the verdict of a netfilter code and chain (as the
// kernel lists a verdict map's value).
func verdictFromCode(code int32, chain string) verdict {
	switch code {
	case nfDrop:
		return verdict{kind: verdictDrop}
	case nfAccept:
		return verdict{kind: verdictAccept}
	case unix.NFT_RETURN:
		return verdict{kind: verdictReturn}
	case unix.NFT_GOTO:
		return verdict{kind: verdictGoto, chain: chain}
	case unix.NFT_JUMP:
		return verdict{kind: verdictJump, chain: chain}
	}
	return verdict{kind: verdictOther, chain: "verdict " + strconv.Itoa(int(code))}
}

// elemSet is the elements one container holds: key → value. Keys are
// packed (elemID: 20 bytes; an elemKey takes 32) and values point at the
// planned element's verdict (commit) or a listed one's: 32 bytes an
// element instead of 56, for the record of every element of the table.
type elemSet map[elemID]*verdict

// elemID is an elemKey packed: the address's bytes and family (0: none).
// Keys never carry a zone (the encoder and nft refuse one).
type elemID struct {
	addr  [16]byte
	port  uint16
	proto uint8
	fam   uint8
}

func idOf(k elemKey) elemID {
	id := elemID{port: k.port, proto: k.proto}
	switch {
	case k.addr.Is4():
		a := k.addr.As4()
		copy(id.addr[:], a[:])
		id.fam = 4
	case k.addr.IsValid():
		id.addr, id.fam = k.addr.As16(), 6
	}
	return id
}

func (id elemID) key() elemKey {
	k := elemKey{port: id.port, proto: id.proto}
	switch id.fam {
	case 4:
		k.addr = netip.AddrFrom4([4]byte(id.addr[:4]))
	case 6:
		k.addr = netip.AddrFrom16(id.addr)
	}
	return k
}

func (s elemSet) get(k elemKey) (verdict, bool) {
	v, ok := s[idOf(k)]
	if !ok {
		return verdict{}, false
	}
	return *v, true
}

func (s elemSet) has(k elemKey) bool {
	_, ok := s[idOf(k)]
	return ok
}

// put records k's value; v must not change afterwards (a plan's, or the
// element's own).
func (s elemSet) put(k elemKey, v *verdict) { s[idOf(k)] = v }

func (s elemSet) del(k elemKey) { delete(s, idOf(k)) }

// putValue records a listed value (its own copy).
func (s elemSet) putValue(k elemKey, v verdict) {
	if v == (verdict{}) {
		s[idOf(k)] = &noVerdict
		return
	}
	s[idOf(k)] = &v
}

// noVerdict is every listed set element's value (never written through).
var noVerdict verdict

// foreignElem is a listed element whose key has a form the engine never
// writes (nft names its protocol, say): kept as text, only to be deleted.
type foreignElem struct {
	container container
	key       []string
}

// parseListedElems turns a listing's n elements (nft's text, or a
// ChainCommentLister's: at(i) is element i's key fields and value) into
// c's elements; keys of other forms are foreign.
func parseListedElems(c container, n int, at func(i int) (key []string, value string)) (elemSet, []foreignElem) {
	m := make(elemSet, n)
	var foreign []foreignElem
	l := c.layout()
	for i := 0; i < n; i++ {
		kf, v := at(i)
		k, ok := parseElemKey(l, kf)
		if !ok || !slices.Equal(k.textFields(l), kf) {
			// Not a form the engine writes, or not as nft writes it
			// ("6" for tcp): deleted by its own text.
			foreign = append(foreign, foreignElem{container: c, key: kf})
			continue
		}
		m.putValue(k, parseVerdictText(v))
	}
	return m, foreign
}

var errShortKey = errors.New("short key")

// protoName is a protocol as nft writes it (tcp, udp, sctp, else its
// number).
func protoName(p byte) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return strconv.Itoa(int(p))
}
