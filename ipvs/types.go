package ipvs

import (
	"errors"
	"fmt"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/sysctl"
	"net/netip"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
)

// Sentinel errors of the kernel interfaces. The real implementations wrap the
// kernel's errno with these (test with errors.Is); the fakes return them too.
var (
	// ErrNotFound: the virtual server, real server, set, entry, link or
	// address does not exist.
	ErrNotFound = errors.New("ipvs: not found")
	// ErrExists: the object to add exists already.
	ErrExists = errors.New("ipvs: already exists")
	// ErrNotSupported: this OS or kernel has no IPVS (or ipset, or dummy links).
	ErrNotSupported = errors.New("ipvs: not supported on this system")
)

// ServiceFlags are the IPVS virtual server flags (IP_VS_SVC_F_*).
type ServiceFlags uint32

const (
	// FlagPersistent makes a client stick to its real server for Timeout seconds.
	FlagPersistent ServiceFlags = 0x1
	// FlagHashed is set by the kernel on every listed service; it is ignored
	// when comparing.
	FlagHashed ServiceFlags = 0x2
	// FlagOnePacket schedules every UDP datagram on its own.
	FlagOnePacket ServiceFlags = 0x4
	// FlagSchedSHFallback and FlagSchedSHPort (= mh's) tune the sh and mh schedulers.
	FlagSchedSHFallback ServiceFlags = 0x8
	FlagSchedSHPort     ServiceFlags = 0x10
)

// VirtualServerKey identifies a virtual server: address, protocol, port.
type VirtualServerKey struct {
	Address  netip.Addr
	Protocol v1.Protocol
	Port     uint16
}

func (k VirtualServerKey) String() string {
	return string(k.Protocol) + " " + netip.AddrPortFrom(k.Address, k.Port).String()
}

// VirtualServer is one IPVS service (ipvsadm -A).
type VirtualServer struct {
	Address  netip.Addr
	Protocol v1.Protocol // TCP, UDP or SCTP
	Port     uint16
	// Scheduler is the IPVS scheduler name (rr, wrr, lc, ...).
	Scheduler string
	Flags     ServiceFlags
	// Timeout is the persistence timeout in seconds (with FlagPersistent).
	Timeout uint32
}

// Key returns the identity of vs.
func (vs *VirtualServer) Key() VirtualServerKey {
	return VirtualServerKey{Address: vs.Address, Protocol: vs.Protocol, Port: vs.Port}
}

// String renders "TCP 10.0.0.1:80".
func (vs *VirtualServer) String() string { return vs.Key().String() }

// Equal reports whether a and b program the kernel identically (FlagHashed
// aside).
func (vs *VirtualServer) Equal(o *VirtualServer) bool {
	return vs.Key() == o.Key() && vs.Scheduler == o.Scheduler &&
		vs.Flags&^FlagHashed == o.Flags&^FlagHashed && vs.Timeout == o.Timeout
}

// RealServer is one destination of a virtual server (ipvsadm -a), always
// in masquerade (NAT) forwarding mode.
type RealServer struct {
	Address netip.Addr
	Port    uint16
	Weight  int
	// ActiveConn and InactiveConn are read back from the kernel; ignored on writes.
	ActiveConn   int
	InactiveConn int
}

// AddrPort returns the real server's address and port.
func (rs *RealServer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(rs.Address, rs.Port) }

func (rs *RealServer) String() string { return rs.AddrPort().String() }

// Timeouts are the IPVS connection timeouts (ipvsadm --set); zero leaves a
// value unchanged.
type Timeouts struct {
	TCP    time.Duration
	TCPFin time.Duration
	UDP    time.Duration
}

// Interface is the IPVS table of one network namespace. The real one
// (New) talks generic netlink through github.com/moby/ipvs; ipvstest.IPVS
// keeps the table in memory.
type Interface interface {
	// AddVirtualServer creates vs; ErrExists if it exists.
	AddVirtualServer(vs *VirtualServer) error
	// UpdateVirtualServer changes scheduler, flags and timeout of vs.
	UpdateVirtualServer(vs *VirtualServer) error
	// DeleteVirtualServer removes vs and its real servers.
	DeleteVirtualServer(vs *VirtualServer) error
	// GetVirtualServers lists every virtual server.
	GetVirtualServers() ([]*VirtualServer, error)
	// AddRealServer adds rs to vs; ErrExists if it is there.
	AddRealServer(vs *VirtualServer, rs *RealServer) error
	// UpdateRealServer changes the weight of rs.
	UpdateRealServer(vs *VirtualServer, rs *RealServer) error
	// DeleteRealServer removes rs from vs.
	DeleteRealServer(vs *VirtualServer, rs *RealServer) error
	// GetRealServers lists the real servers of vs with their connection counts.
	GetRealServers(vs *VirtualServer) ([]*RealServer, error)
	// SetTimeouts sets the connection timeouts (zero fields unchanged).
	SetTimeouts(t Timeouts) error
	// GetTimeouts reads them back.
	GetTimeouts() (Timeouts, error)
	// Flush removes every virtual server.
	Flush() error
	// Close releases the netlink socket.
	Close() error
}

// SetType is an ipset type.
type SetType string

// The ipset types the IPVS proxier uses.
const (
	HashIP        SetType = "hash:ip"
	HashIPPort    SetType = "hash:ip,port"
	HashIPPortIP  SetType = "hash:ip,port,ip"
	HashIPPortNet SetType = "hash:ip,port,net"
	HashNet       SetType = "hash:net"
	BitmapPort    SetType = "bitmap:port"
)

// Set describes one ipset.
type Set struct {
	Name string
	Type SetType
	// Family is the address family of hash sets (ignored for bitmap:port).
	Family v1.IPFamily
	// PortFrom and PortTo bound a bitmap:port set (0,0 means 0-65535).
	PortFrom, PortTo uint16
	// Comment is shown in dumps only (the kernel does not keep it).
	Comment string
}

// Entry is one member of a set. Which fields count depends on the set type:
// hash:ip IP; hash:ip,port IP,Protocol,Port; hash:ip,port,ip adds IP2;
// hash:ip,port,net adds Net; hash:net Net; bitmap:port Port.
type Entry struct {
	IP       netip.Addr
	Protocol v1.Protocol
	Port     uint16
	IP2      netip.Addr
	Net      netip.Prefix
}

// Render formats e the way `ipset list` shows it in a set of type t:
// "10.0.0.1,tcp:80", "10.0.0.1,tcp:80,10.244.0.5", "10.0.0.0/8", "30080".
func (e Entry) Render(t SetType) string {
	proto := proxy.LowerProtocol(e.Protocol)
	ipport := func() string { return e.IP.String() + "," + proto + ":" + strconv.Itoa(int(e.Port)) }
	switch t {
	case HashIP:
		return e.IP.String()
	case HashIPPort:
		return ipport()
	case HashIPPortIP:
		return ipport() + "," + e.IP2.String()
	case HashIPPortNet:
		return ipport() + "," + e.Net.String()
	case HashNet:
		return e.Net.String()
	case BitmapPort:
		return strconv.Itoa(int(e.Port))
	}
	return fmt.Sprintf("%+v", e)
}

// Valid checks that e has what a set of type t needs, of family fam.
func (e Entry) Valid(t SetType, fam v1.IPFamily) error {
	okIP := func(a netip.Addr) bool { return a.IsValid() && (a.Is4() == (fam != v1.IPv6Protocol)) }
	okProto := e.Protocol == v1.ProtocolTCP || e.Protocol == v1.ProtocolUDP || e.Protocol == v1.ProtocolSCTP
	bad := false
	switch t {
	case HashIP:
		bad = !okIP(e.IP)
	case HashIPPort:
		bad = !okIP(e.IP) || !okProto
	case HashIPPortIP:
		bad = !okIP(e.IP) || !okProto || !okIP(e.IP2)
	case HashIPPortNet:
		bad = !okIP(e.IP) || !okProto || !e.Net.IsValid() || !okIP(e.Net.Addr())
	case HashNet:
		bad = !e.Net.IsValid() || !okIP(e.Net.Addr())
	case BitmapPort:
		bad = false
	default:
		return fmt.Errorf("ipset: unknown set type %q", t)
	}
	if bad {
		return fmt.Errorf("ipset: entry %s does not fit a %s set of family %s", e.Render(t), t, fam)
	}
	return nil
}

// IPSet manages ipsets. The real one (ipvskernel.NewIPSet) uses netlink (no exec);
// ipvstest.IPSet keeps them in memory.
type IPSet interface {
	// CreateSet creates set; ErrExists if a set of that name exists.
	CreateSet(set Set) error
	// DestroySet removes a set (the kernel refuses while iptables uses it).
	DestroySet(name string) error
	// FlushSet removes every entry of a set.
	FlushSet(name string) error
	// ListSets lists every set (Comment is empty for kernel sets).
	ListSets() ([]Set, error)
	// AddEntry adds e to set; ErrExists if present.
	AddEntry(set string, e Entry) error
	// DelEntry removes e; ErrNotFound if missing.
	DelEntry(set string, e Entry) error
	// ListEntries lists the entries of set.
	ListEntries(set string) ([]Entry, error)
}

// Netlink is the small part of rtnetlink the proxier needs: the dummy link
// that holds service addresses, and the node's own addresses.
type Netlink interface {
	// EnsureDummyDevice creates a dummy link (down is fine: it only has to
	// make addresses local) unless it exists.
	EnsureDummyDevice(name string) (existed bool, err error)
	// DeleteDummyDevice removes it.
	DeleteDummyDevice(name string) error
	// EnsureAddressBind adds addr (as a /32 or /128) to dev unless present.
	EnsureAddressBind(addr netip.Addr, dev string) (existed bool, err error)
	// UnbindAddress removes addr from dev; ErrNotFound if it is not there.
	UnbindAddress(addr netip.Addr, dev string) error
	// ListBindAddresses lists the addresses on dev (ErrNotFound: no such link).
	ListBindAddresses(dev string) ([]netip.Addr, error)
	// LocalAddresses lists the node's addresses of the family on every link
	// but the named one (kube-ipvs0): the candidates for node ports.
	LocalAddresses(family v1.IPFamily, exceptDev string) ([]netip.Addr, error)
}

// Sysctl reads and writes /proc/sys entries ("net/ipv4/vs/conntrack").
type Sysctl = sysctl.Interface
