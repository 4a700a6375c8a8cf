//go:build linux

package ipvskernel

import (
	"errors"
	"fmt"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/sysctl"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Options configure the real kernel interfaces. The zero value is the
// current network namespace with a 5 s socket timeout.
type Options struct {
	// NetNSPath is a network namespace file (/var/run/netns/x,
	// /proc/PID/ns/net); "" is the caller's current namespace.
	NetNSPath string
	// SocketTimeout bounds every rtnetlink and ipset netlink call so a stuck
	// kernel call cannot hang a sync (0: 5 s). The IPVS socket is set up by
	// github.com/moby/ipvs with its own fixed timeouts (3 s receive, 30 s send).
	SocketTimeout time.Duration
}

func (o Options) timeout() time.Duration {
	if o.SocketTimeout <= 0 {
		return 5 * time.Second
	}
	return o.SocketTimeout
}

// kernelError carries both our sentinel (ErrNotFound, ErrExists) and the errno.
type kernelError struct {
	op   string
	kind error
	err  error
}

func (e *kernelError) Error() string {
	return e.op + ": " + e.err.Error()
}

func (e *kernelError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}

func kerr(op string, err error) error {
	if err == nil {
		return nil
	}
	var kind error
	switch {
	case errors.Is(err, unix.EEXIST):
		kind = ipvs.ErrExists
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENODEV),
		errors.Is(err, unix.EADDRNOTAVAIL):
		kind = ipvs.ErrNotFound
	case errors.Is(err, unix.EPROTONOSUPPORT), errors.Is(err, unix.EAFNOSUPPORT):
		kind = ipvs.ErrNotSupported
	}
	return &kernelError{op: op, kind: kind, err: err}
}

// ---------------------------------------------------------------- IPVS

type kernelIPVS struct {
	h *mobyipvs.Handle
}

// New returns the IPVS table of the namespace in opts, through generic
// netlink (github.com/moby/ipvs). Calls are not retried; every error wraps
// the errno and, where it applies, ErrNotFound or ErrExists.
func New(opts Options) (ipvs.Interface, error) {
	h, err := mobyipvs.New(opts.NetNSPath)
	if err != nil {
		return nil, kerr("ipvs: open generic netlink", err)
	}
	return &kernelIPVS{h: h}, nil
}

func protoNum(p v1.Protocol) uint16 {
	switch p {
	case v1.ProtocolUDP:
		return unix.IPPROTO_UDP
	case v1.ProtocolSCTP:
		return unix.IPPROTO_SCTP
	}
	return unix.IPPROTO_TCP
}

func protoName(n uint16) v1.Protocol {
	switch n {
	case unix.IPPROTO_UDP:
		return v1.ProtocolUDP
	case unix.IPPROTO_SCTP:
		return v1.ProtocolSCTP
	case unix.IPPROTO_TCP:
		return v1.ProtocolTCP
	}
	return v1.Protocol(strconv.Itoa(int(n)))
}

func toMobyService(vs *ipvs.VirtualServer) *mobyipvs.Service {
	s := &mobyipvs.Service{
		Address:   net.IP(vs.Address.AsSlice()),
		Protocol:  protoNum(vs.Protocol),
		Port:      vs.Port,
		SchedName: vs.Scheduler,
		Flags:     uint32(vs.Flags),
		Timeout:   vs.Timeout,
	}
	if vs.Address.Is4() {
		s.AddressFamily = unix.AF_INET
		s.Netmask = 0xffffffff
	} else {
		s.AddressFamily = unix.AF_INET6
		s.Netmask = 128
	}
	if s.SchedName == "" {
		s.SchedName = ipvs.DefaultScheduler
	}
	return s
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func fromMobyService(s *mobyipvs.Service) *ipvs.VirtualServer {
	return &ipvs.VirtualServer{
		Address:   addrOf(s.Address),
		Protocol:  protoName(s.Protocol),
		Port:      s.Port,
		Scheduler: s.SchedName,
		Flags:     ipvs.ServiceFlags(s.Flags),
		Timeout:   s.Timeout,
	}
}

func toMobyDest(rs *ipvs.RealServer) *mobyipvs.Destination {
	d := &mobyipvs.Destination{
		Address:         net.IP(rs.Address.AsSlice()),
		Port:            rs.Port,
		Weight:          rs.Weight,
		ConnectionFlags: mobyipvs.ConnFwdMasq,
	}
	if rs.Address.Is4() {
		d.AddressFamily = unix.AF_INET
	} else {
		d.AddressFamily = unix.AF_INET6
	}
	return d
}

func (k *kernelIPVS) AddVirtualServer(vs *ipvs.VirtualServer) error {
	if err := k.h.NewService(toMobyService(vs)); err != nil {
		return kerr("ipvs: add virtual server "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) UpdateVirtualServer(vs *ipvs.VirtualServer) error {
	if err := k.h.UpdateService(toMobyService(vs)); err != nil {
		return kerr("ipvs: update virtual server "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) DeleteVirtualServer(vs *ipvs.VirtualServer) error {
	if err := k.h.DelService(toMobyService(vs)); err != nil {
		return kerr("ipvs: delete virtual server "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) GetVirtualServers() ([]*ipvs.VirtualServer, error) {
	svcs, err := k.h.GetServices()
	if err != nil {
		return nil, kerr("ipvs: list virtual servers", err)
	}
	out := make([]*ipvs.VirtualServer, 0, len(svcs))
	for _, s := range svcs {
		if s.FWMark != 0 {
			continue // firewall-mark services are not ours
		}
		out = append(out, fromMobyService(s))
	}
	return out, nil
}

func (k *kernelIPVS) AddRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := k.h.NewDestination(toMobyService(vs), toMobyDest(rs)); err != nil {
		return kerr("ipvs: add real server "+rs.String()+" to "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) UpdateRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := k.h.UpdateDestination(toMobyService(vs), toMobyDest(rs)); err != nil {
		return kerr("ipvs: update real server "+rs.String()+" of "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) DeleteRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := k.h.DelDestination(toMobyService(vs), toMobyDest(rs)); err != nil {
		return kerr("ipvs: delete real server "+rs.String()+" of "+vs.String(), err)
	}
	return nil
}

func (k *kernelIPVS) GetRealServers(vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	ds, err := k.h.GetDestinations(toMobyService(vs))
	if err != nil {
		return nil, kerr("ipvs: list real servers of "+vs.String(), err)
	}
	out := make([]*ipvs.RealServer, 0, len(ds))
	for _, d := range ds {
		out = append(out, &ipvs.RealServer{
			Address: addrOf(d.Address), Port: d.Port, Weight: d.Weight,
			ActiveConn: d.ActiveConnections, InactiveConn: d.InactiveConnections,
		})
	}
	return out, nil
}

func (k *kernelIPVS) SetTimeouts(t ipvs.Timeouts) error {
	return kerr("ipvs: set timeouts", k.h.SetConfig(&mobyipvs.Config{TimeoutTCP: t.TCP, TimeoutTCPFin: t.TCPFin, TimeoutUDP: t.UDP}))
}

func (k *kernelIPVS) GetTimeouts() (ipvs.Timeouts, error) {
	c, err := k.h.GetConfig()
	if err != nil {
		return ipvs.Timeouts{}, kerr("ipvs: get timeouts", err)
	}
	return ipvs.Timeouts{TCP: c.TimeoutTCP, TCPFin: c.TimeoutTCPFin, UDP: c.TimeoutUDP}, nil
}

func (k *kernelIPVS) Flush() error { return kerr("ipvs: flush", k.h.Flush()) }

func (k *kernelIPVS) Close() error {
	k.h.Close()
	return nil
}

// ---------------------------------------------------------------- handles

func openHandle(opts Options) (*netlink.Handle, error) {
	var h *netlink.Handle
	var err error
	if opts.NetNSPath != "" {
		ns, nerr := netns.GetFromPath(opts.NetNSPath)
		if nerr != nil {
			return nil, fmt.Errorf("netlink: open namespace %s: %w", opts.NetNSPath, nerr)
		}
		defer ns.Close()
		h, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_NETFILTER)
	}
	if err != nil {
		return nil, kerr("netlink: open", err)
	}
	if err := h.SetSocketTimeout(opts.timeout()); err != nil {
		h.Close()
		return nil, kerr("netlink: set socket timeout", err)
	}
	return h, nil
}

// ---------------------------------------------------------------- ipset

// errIPSetExist is IPSET_ERR_EXIST: on add "already added", on delete "not added".
const errIPSetExist = nl.IPSetError(nl.IPSET_ERR_EXIST)

type kernelIPSet struct {
	h *netlink.Handle
	// types caches each set's type: adding an entry needs it, and asking
	// the kernel lists the whole set.
	mu    sync.Mutex
	types map[string]ipvs.SetType
	// sock carries the requests netlink's ipset API cannot express (a
	// bitmap:port entry without a protocol attribute).
	sock *nl.NetlinkSocket
}

// NewIPSet returns the ipsets of the namespace in opts, managed through
// netfilter netlink (no ipset binary needed).
func NewIPSet(opts Options) (ipvs.IPSet, error) {
	h, err := openHandle(opts)
	if err != nil {
		return nil, err
	}
	target := netns.None()
	if opts.NetNSPath != "" {
		if target, err = netns.GetFromPath(opts.NetNSPath); err != nil {
			h.Close()
			return nil, fmt.Errorf("netlink: open namespace %s: %w", opts.NetNSPath, err)
		}
		defer target.Close()
	}
	sock, err := nl.GetNetlinkSocketAt(target, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		h.Close()
		return nil, kerr("ipset: open netlink socket", err)
	}
	tv := unix.NsecToTimeval(opts.timeout().Nanoseconds())
	if err := sock.SetSendTimeout(&tv); err == nil {
		err = sock.SetReceiveTimeout(&tv)
	}
	if err != nil {
		sock.Close()
		h.Close()
		return nil, kerr("ipset: set socket timeout", err)
	}
	return &kernelIPSet{h: h, sock: sock, types: make(map[string]ipvs.SetType)}, nil
}

// portEntry adds or deletes a bitmap:port entry. netlink's IPSetEntry always
// carries a protocol with a port, which the kernel refuses for bitmap:port
// (IPSET_ERR_PROTOCOL); this request has only the port, as ipset(8) sends.
func (k *kernelIPSet) portEntry(cmd int, set string, port uint16) error {
	req := nl.NewNetlinkRequest(cmd|(unix.NFNL_SUBSYS_IPSET<<8), nl.GetIpsetFlags(cmd))
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_NETFILTER: {Socket: k.sock}}
	req.Flags |= unix.NLM_F_EXCL
	req.AddData(&nl.Nfgenmsg{NfgenFamily: uint8(unix.AF_NETLINK), Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(set)))
	data := nl.NewRtAttr(nl.IPSET_ATTR_DATA|int(nl.NLA_F_NESTED), nil)
	buf := []byte{byte(port >> 8), byte(port)}
	data.AddChild(nl.NewRtAttr(int(nl.IPSET_ATTR_PORT|nl.NLA_F_NET_BYTEORDER), buf))
	data.AddChild(&nl.Uint32Attribute{Type: nl.IPSET_ATTR_LINENO | nl.NLA_F_NET_BYTEORDER, Value: 0})
	req.AddData(data)
	_, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	var errno unix.Errno
	if errors.As(err, &errno) && int(errno) >= nl.IPSET_ERR_PRIVATE {
		err = nl.IPSetError(uintptr(errno))
	}
	return err
}

func familyNum(f v1.IPFamily) uint8 {
	if f == v1.IPv6Protocol {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func (k *kernelIPSet) CreateSet(set ipvs.Set) error {
	o := netlink.IpsetCreateOptions{Family: familyNum(set.Family)}
	if set.Type == ipvs.BitmapPort {
		o.PortFrom, o.PortTo = set.PortFrom, set.PortTo
		if o.PortFrom == 0 && o.PortTo == 0 {
			o.PortTo = 65535
		}
	}
	err := k.h.IpsetCreate(set.Name, string(set.Type), o)
	if err == nil {
		k.mu.Lock()
		k.types[set.Name] = set.Type
		k.mu.Unlock()
	}
	if errors.Is(err, errIPSetExist) || errors.Is(err, nl.IPSetError(nl.IPSET_ERR_EXIST_SETNAME2)) {
		return &kernelError{op: "ipset: create " + set.Name, kind: ipvs.ErrExists, err: err}
	}
	return kerr("ipset: create "+set.Name, err)
}

func (k *kernelIPSet) DestroySet(name string) error {
	k.mu.Lock()
	delete(k.types, name)
	k.mu.Unlock()
	return kerr("ipset: destroy "+name, k.h.IpsetDestroy(name))
}

func (k *kernelIPSet) FlushSet(name string) error {
	return kerr("ipset: flush "+name, k.h.IpsetFlush(name))
}

func (k *kernelIPSet) ListSets() ([]ipvs.Set, error) {
	rs, err := k.h.IpsetListAll()
	if err != nil {
		return nil, kerr("ipset: list", err)
	}
	out := make([]ipvs.Set, 0, len(rs))
	k.mu.Lock()
	present := make(map[string]bool, len(rs))
	for _, r := range rs {
		present[r.SetName] = true
		if r.TypeName != "" { // the dump may leave it out: keep what we know
			k.types[r.SetName] = ipvs.SetType(r.TypeName)
		}
	}
	for name := range k.types {
		if !present[name] {
			delete(k.types, name)
		}
	}
	k.mu.Unlock()
	for _, r := range rs {
		s := ipvs.Set{Name: r.SetName, Type: ipvs.SetType(r.TypeName), Family: v1.IPv4Protocol, PortFrom: r.PortFrom, PortTo: r.PortTo}
		if r.Family == unix.AF_INET6 {
			s.Family = v1.IPv6Protocol
		}
		out = append(out, s)
	}
	return out, nil
}

func toNetlinkEntry(t ipvs.SetType, e ipvs.Entry) *netlink.IPSetEntry {
	ne := &netlink.IPSetEntry{}
	port := e.Port
	proto := uint8(protoNum(e.Protocol))
	switch t {
	case ipvs.HashIP:
		ne.IP = e.IP.AsSlice()
	case ipvs.HashIPPort, ipvs.HashIPPortIP, ipvs.HashIPPortNet:
		ne.IP = e.IP.AsSlice()
		ne.Port, ne.Protocol = &port, &proto
		if t == ipvs.HashIPPortIP {
			ne.IP2 = e.IP2.AsSlice()
		}
		if t == ipvs.HashIPPortNet {
			ne.IP2 = e.Net.Masked().Addr().AsSlice()
			ne.CIDR2 = uint8(e.Net.Bits())
		}
	case ipvs.HashNet:
		ne.IP = e.Net.Masked().Addr().AsSlice()
		ne.CIDR = uint8(e.Net.Bits())
	case ipvs.BitmapPort:
		// not sent through netlink's IPSetEntry (see portEntry)
		ne.Port = &port
	}
	return ne
}

func fromNetlinkEntry(t ipvs.SetType, ne netlink.IPSetEntry) ipvs.Entry {
	var e ipvs.Entry
	if ne.Port != nil {
		e.Port = *ne.Port
	}
	if ne.Protocol != nil && t != ipvs.BitmapPort {
		e.Protocol = protoName(uint16(*ne.Protocol))
	}
	switch t {
	case ipvs.HashNet:
		e.Net = netip.PrefixFrom(addrOf(ne.IP), int(ne.CIDR))
	case ipvs.HashIPPortNet:
		e.IP = addrOf(ne.IP)
		e.Net = netip.PrefixFrom(addrOf(ne.IP2), int(ne.CIDR2))
	case ipvs.HashIPPortIP:
		e.IP = addrOf(ne.IP)
		e.IP2 = addrOf(ne.IP2)
	case ipvs.BitmapPort:
	default:
		e.IP = addrOf(ne.IP)
	}
	return e
}

func (k *kernelIPSet) setType(name string) (ipvs.SetType, *netlink.IPSetResult, error) {
	r, err := k.h.IpsetList(name)
	if err != nil {
		return "", nil, kerr("ipset: list "+name, err)
	}
	return ipvs.SetType(r.TypeName), r, nil
}

// cachedType returns the type of set, asking the kernel only once.
func (k *kernelIPSet) cachedType(set string) (ipvs.SetType, error) {
	k.mu.Lock()
	t, ok := k.types[set]
	k.mu.Unlock()
	if ok {
		return t, nil
	}
	t, _, err := k.setType(set)
	if err != nil {
		return "", err
	}
	k.mu.Lock()
	k.types[set] = t
	k.mu.Unlock()
	return t, nil
}

func (k *kernelIPSet) AddEntry(set string, e ipvs.Entry) error {
	t, err := k.cachedType(set)
	if err != nil {
		return err
	}
	if t == ipvs.BitmapPort {
		err = k.portEntry(nl.IPSET_CMD_ADD, set, e.Port)
	} else {
		err = k.h.IpsetAdd(set, toNetlinkEntry(t, e))
	}
	if errors.Is(err, errIPSetExist) {
		return &kernelError{op: "ipset: add " + e.Render(t) + " to " + set, kind: ipvs.ErrExists, err: err}
	}
	if err != nil {
		return kerr("ipset: add "+e.Render(t)+" to "+set, err)
	}
	return nil
}

func (k *kernelIPSet) DelEntry(set string, e ipvs.Entry) error {
	t, err := k.cachedType(set)
	if err != nil {
		return err
	}
	if t == ipvs.BitmapPort {
		err = k.portEntry(nl.IPSET_CMD_DEL, set, e.Port)
	} else {
		err = k.h.IpsetDel(set, toNetlinkEntry(t, e))
	}
	if errors.Is(err, errIPSetExist) { // on delete: the element is not in the set
		return &kernelError{op: "ipset: del " + e.Render(t) + " from " + set, kind: ipvs.ErrNotFound, err: err}
	}
	if err != nil {
		return kerr("ipset: del "+e.Render(t)+" from "+set, err)
	}
	return nil
}

func (k *kernelIPSet) ListEntries(set string) ([]ipvs.Entry, error) {
	t, r, err := k.setType(set)
	if err != nil {
		return nil, err
	}
	out := make([]ipvs.Entry, 0, len(r.Entries))
	for _, ne := range r.Entries {
		out = append(out, fromNetlinkEntry(t, ne))
	}
	return out, nil
}

// ---------------------------------------------------------------- rtnetlink

type kernelNetlink struct {
	h *netlink.Handle
}

// NewNetlink returns the link and address operations of the namespace in opts.
func NewNetlink(opts Options) (ipvs.Netlink, error) {
	h, err := openHandle(opts)
	if err != nil {
		return nil, err
	}
	return &kernelNetlink{h: h}, nil
}

func (k *kernelNetlink) EnsureDummyDevice(name string) (bool, error) {
	if _, err := k.h.LinkByName(name); err == nil {
		return true, nil
	}
	err := k.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}})
	if errors.Is(err, unix.EEXIST) {
		return true, nil
	}
	return false, kerr("netlink: add dummy link "+name, err)
}

func (k *kernelNetlink) DeleteDummyDevice(name string) error {
	l, err := k.h.LinkByName(name)
	if err != nil {
		return &kernelError{op: "netlink: find link " + name, kind: ipvs.ErrNotFound, err: err}
	}
	if _, ok := l.(*netlink.Dummy); !ok {
		return fmt.Errorf("netlink: link %s is a %s, not a dummy link; not deleting it", name, l.Type())
	}
	return kerr("netlink: delete link "+name, k.h.LinkDel(l))
}

func hostNet(addr netip.Addr) *net.IPNet {
	return &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}
}

func (k *kernelNetlink) link(dev string) (netlink.Link, error) {
	l, err := k.h.LinkByName(dev)
	if err != nil {
		return nil, &kernelError{op: "netlink: find link " + dev, kind: ipvs.ErrNotFound, err: err}
	}
	return l, nil
}

func (k *kernelNetlink) EnsureAddressBind(addr netip.Addr, dev string) (bool, error) {
	l, err := k.link(dev)
	if err != nil {
		return false, err
	}
	err = k.h.AddrAdd(l, &netlink.Addr{IPNet: hostNet(addr)})
	if errors.Is(err, unix.EEXIST) {
		return true, nil
	}
	if err != nil {
		return false, kerr("netlink: bind "+addr.String()+" to "+dev, err)
	}
	return false, nil
}

func (k *kernelNetlink) UnbindAddress(addr netip.Addr, dev string) error {
	l, err := k.link(dev)
	if err != nil {
		return err
	}
	if err := k.h.AddrDel(l, &netlink.Addr{IPNet: hostNet(addr)}); err != nil {
		return kerr("netlink: unbind "+addr.String()+" from "+dev, err)
	}
	return nil
}

func (k *kernelNetlink) ListBindAddresses(dev string) ([]netip.Addr, error) {
	l, err := k.link(dev)
	if err != nil {
		return nil, err
	}
	as, err := k.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, kerr("netlink: list addresses of "+dev, err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		out = append(out, addrOf(a.IP))
	}
	return out, nil
}

func (k *kernelNetlink) LocalAddresses(family v1.IPFamily, exceptDev string) ([]netip.Addr, error) {
	fam := netlink.FAMILY_V4
	if family == v1.IPv6Protocol {
		fam = netlink.FAMILY_V6
	}
	except := -1
	if exceptDev != "" {
		if l, err := k.h.LinkByName(exceptDev); err == nil {
			except = l.Attrs().Index
		}
	}
	as, err := k.h.AddrList(nil, fam)
	if err != nil {
		return nil, kerr("netlink: list addresses", err)
	}
	var out []netip.Addr
	for _, a := range as {
		if a.LinkIndex == except {
			continue
		}
		out = append(out, addrOf(a.IP))
	}
	return out, nil
}

// ---------------------------------------------------------------- sysctl

// NewSysctl returns the /proc/sys of the calling thread's namespaces.
// Network sysctls are per namespace: call it from the namespace to change.
func NewSysctl() ipvs.Sysctl { return sysctl.New() }
