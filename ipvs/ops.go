package ipvs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// opKind is one kind of kernel change.
type opKind uint8

const (
	opCreateSet opKind = iota
	opAddVS
	opUpdateVS
	opAddRS
	opUpdateRS
	opBind
	opAddEntry
	opDelEntry
	opDelRS
	opDelVS
	opUnbind
	// opAdoptDrain queues a real server found at weight 0 (draining since
	// before a restart, say) for deletion; it changes nothing in the kernel.
	opAdoptDrain
	// opReapRS deletes a draining real server once it has no connections
	// left or its GracefulTerminationPeriod passed (apply lists the virtual
	// server's real servers to decide); otherwise it leaves it queued.
	opReapRS
)

// op is one kernel change. Ops are applied in the order they are planned:
// additions first, then removals, so a service never disappears while its
// replacement is being set up; graceful-termination bookkeeping and
// deletions last. The diff that makes ops is pure: what an op does to the
// proxier's own records (the graceful queue, the virtual servers it owns)
// happens when apply runs it, so a dry run is plan + diff, printed.
//
// An op is small (a cold start at 10,000 services makes ~145,000 of them):
// what it touches is held by pointer, and the pointees are never written
// once an op refers to them (a plan's virtual server, a kernel listing's, a
// graceful item's, a set spec, an entry of the diff's own slab or a copy).
type op struct {
	kind opKind
	// weight: the real server's weight (RS kinds).
	weight int32
	// vs: the virtual server of the VS and RS kinds.
	vs *VirtualServer
	// set: the set of opCreateSet and the entry kinds; entry: the entry.
	set   *Set
	entry *Entry
	// rs: the real server of the RS kinds; for opBind and opUnbind, the
	// address (port 0, see addr).
	rs netip.AddrPort
}

// rsOp is an op of an RS kind on vs and rs.
func rsOp(kind opKind, vs *VirtualServer, rs RealServer) op {
	return op{kind: kind, weight: int32(rs.Weight), vs: vs, rs: rs.AddrPort()}
}

// addrOp is an opBind or opUnbind of a.
func addrOp(kind opKind, a netip.Addr) op { return op{kind: kind, rs: netip.AddrPortFrom(a, 0)} }

// realServer is the real server of an RS op.
func (o *op) realServer() RealServer {
	return RealServer{Address: o.rs.Addr(), Port: o.rs.Port(), Weight: int(o.weight)}
}

// addr is the address of opBind and opUnbind.
func (o *op) addr() netip.Addr { return o.rs.Addr() }

func ipvsadmProto(p v1.Protocol) string {
	switch p {
	case v1.ProtocolUDP:
		return "-u"
	case v1.ProtocolSCTP:
		return "--sctp-service"
	}
	return "-t"
}

func vsArgs(vs *VirtualServer) string {
	return ipvsadmProto(vs.Protocol) + " " + netip.AddrPortFrom(vs.Address, vs.Port).String()
}

func vsOptions(vs *VirtualServer) string {
	s := "-s " + vs.Scheduler
	if vs.Flags&FlagPersistent != 0 {
		s += " -p " + strconv.Itoa(int(vs.Timeout))
	}
	return s
}

// String renders the op as the equivalent ipvsadm / ip / ipset command.
func (o *op) String() string {
	switch o.kind {
	case opCreateSet:
		s := "ipset create " + o.set.Name + " " + string(o.set.Type)
		if o.set.Type != BitmapPort {
			if o.set.Family == v1.IPv6Protocol {
				s += " family inet6"
			} else {
				s += " family inet"
			}
		} else {
			s += " range 0-65535"
		}
		return s
	case opAddVS:
		return "ipvsadm -A " + vsArgs(o.vs) + " " + vsOptions(o.vs)
	case opUpdateVS:
		return "ipvsadm -E " + vsArgs(o.vs) + " " + vsOptions(o.vs)
	case opDelVS:
		return "ipvsadm -D " + vsArgs(o.vs)
	case opAddRS:
		return "ipvsadm -a " + vsArgs(o.vs) + " -r " + o.rs.String() + " -m -w " + strconv.Itoa(int(o.weight))
	case opUpdateRS:
		return "ipvsadm -e " + vsArgs(o.vs) + " -r " + o.rs.String() + " -m -w " + strconv.Itoa(int(o.weight))
	case opDelRS:
		return "ipvsadm -d " + vsArgs(o.vs) + " -r " + o.rs.String()
	case opBind:
		return "ip addr add " + netip.PrefixFrom(o.addr(), o.addr().BitLen()).String() + " dev " + DummyDevice
	case opUnbind:
		return "ip addr del " + netip.PrefixFrom(o.addr(), o.addr().BitLen()).String() + " dev " + DummyDevice
	case opAddEntry:
		return "ipset add " + o.set.Name + " " + o.entry.Render(o.set.Type)
	case opDelEntry:
		return "ipset del " + o.set.Name + " " + o.entry.Render(o.set.Type)
	case opAdoptDrain:
		return "# draining (weight 0): " + vsArgs(o.vs) + " -r " + o.rs.String()
	case opReapRS:
		return "ipvsadm -d " + vsArgs(o.vs) + " -r " + o.rs.String() + " # once its connections end"
	}
	return fmt.Sprintf("op(%d)", o.kind)
}

// opList is an ordered batch of ops.
type opList []op

func (l opList) String() string {
	var b strings.Builder
	for i := range l {
		b.WriteString(l[i].String())
		b.WriteByte('\n')
	}
	return b.String()
}
