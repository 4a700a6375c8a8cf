package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// IPVS is an in-memory IPVS table implementing ipvs.Interface, with the
// kernel's errors (ipvs.ErrExists, ipvs.ErrNotFound), call counting and
// fault injection. Safe for concurrent use.
type IPVS struct {
	proxytest.Faults
	mu       sync.Mutex
	services map[ipvs.VirtualServerKey]*fakeService
	timeouts ipvs.Timeouts
	closed   bool
}

type fakeService struct {
	vs  ipvs.VirtualServer
	rss map[netip.AddrPort]*ipvs.RealServer
}

var _ ipvs.Interface = (*IPVS)(nil)

// NewIPVS returns an empty table with the kernel's default timeouts
// (900 s, 120 s, 300 s).
func NewIPVS() *IPVS {
	return &IPVS{
		services: make(map[ipvs.VirtualServerKey]*fakeService),
		timeouts: ipvs.Timeouts{TCP: 900e9, TCPFin: 120e9, UDP: 300e9},
	}
}

func validVS(vs *ipvs.VirtualServer) error {
	if vs == nil || !vs.Address.IsValid() || vs.Port == 0 {
		return fmt.Errorf("ipvstest: invalid virtual server %v: %w", vs, ErrInvalid)
	}
	switch vs.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		return fmt.Errorf("ipvstest: virtual server protocol %q: %w", vs.Protocol, ErrInvalid)
	}
	return nil
}

// AddVirtualServer implements ipvs.Interface.
func (f *IPVS) AddVirtualServer(vs *ipvs.VirtualServer) error {
	if err := f.Hit("AddVirtualServer"); err != nil {
		return err
	}
	if err := validVS(vs); err != nil {
		return err
	}
	if vs.Scheduler != "" && !slices.Contains(ipvs.AllSchedulers, vs.Scheduler) && vs.Scheduler != "fo" && vs.Scheduler != "ovf" {
		return fmt.Errorf("ipvstest: unknown scheduler %q: %w", vs.Scheduler, ipvs.ErrNotFound)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := vs.Key()
	if _, ok := f.services[k]; ok {
		return fmt.Errorf("ipvstest: virtual server %s: %w", k, ipvs.ErrExists)
	}
	c := *vs
	c.Address = c.Address.Unmap()
	if c.Scheduler == "" {
		c.Scheduler = ipvs.DefaultScheduler
	}
	c.Flags |= ipvs.FlagHashed
	f.services[c.Key()] = &fakeService{vs: c, rss: make(map[netip.AddrPort]*ipvs.RealServer)}
	return nil
}

func (f *IPVS) lookup(vs *ipvs.VirtualServer) (*fakeService, error) {
	if vs == nil {
		return nil, fmt.Errorf("ipvstest: nil virtual server: %w", ErrInvalid)
	}
	s, ok := f.services[vs.Key()]
	if !ok {
		return nil, fmt.Errorf("ipvstest: virtual server %s: %w", vs.Key(), ipvs.ErrNotFound)
	}
	return s, nil
}

// UpdateVirtualServer implements ipvs.Interface.
func (f *IPVS) UpdateVirtualServer(vs *ipvs.VirtualServer) error {
	if err := f.Hit("UpdateVirtualServer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.lookup(vs)
	if err != nil {
		return err
	}
	s.vs.Scheduler, s.vs.Flags, s.vs.Timeout = vs.Scheduler, vs.Flags|ipvs.FlagHashed, vs.Timeout
	if s.vs.Scheduler == "" {
		s.vs.Scheduler = ipvs.DefaultScheduler
	}
	return nil
}

// DeleteVirtualServer implements ipvs.Interface.
func (f *IPVS) DeleteVirtualServer(vs *ipvs.VirtualServer) error {
	if err := f.Hit("DeleteVirtualServer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.lookup(vs); err != nil {
		return err
	}
	delete(f.services, vs.Key())
	return nil
}

// GetVirtualServers implements ipvs.Interface (sorted).
func (f *IPVS) GetVirtualServers() ([]*ipvs.VirtualServer, error) {
	if err := f.Hit("GetVirtualServers"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*ipvs.VirtualServer, 0, len(f.services))
	for _, s := range f.sorted() {
		c := s.vs
		out = append(out, &c)
	}
	return out, nil
}

func (f *IPVS) sorted() []*fakeService {
	out := make([]*fakeService, 0, len(f.services))
	for _, s := range f.services {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *fakeService) int {
		if a.vs.Protocol != b.vs.Protocol {
			return strings.Compare(string(a.vs.Protocol), string(b.vs.Protocol))
		}
		return netip.AddrPortFrom(a.vs.Address, a.vs.Port).Compare(netip.AddrPortFrom(b.vs.Address, b.vs.Port))
	})
	return out
}

func validRS(rs *ipvs.RealServer, vs *ipvs.VirtualServer) error {
	if rs == nil || !rs.Address.IsValid() || rs.Address.Unmap().Is4() != vs.Address.Unmap().Is4() {
		return fmt.Errorf("ipvstest: invalid real server %v for %s: %w", rs, vs, ErrInvalid)
	}
	if rs.Weight < 0 {
		return fmt.Errorf("ipvstest: negative weight for %s: %w", rs, ErrInvalid)
	}
	return nil
}

// AddRealServer implements ipvs.Interface.
func (f *IPVS) AddRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := f.Hit("AddRealServer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.lookup(vs)
	if err != nil {
		return err
	}
	if err := validRS(rs, vs); err != nil {
		return err
	}
	k := rs.AddrPort()
	if _, ok := s.rss[k]; ok {
		return fmt.Errorf("ipvstest: real server %s of %s: %w", k, vs, ipvs.ErrExists)
	}
	s.rss[k] = &ipvs.RealServer{Address: rs.Address.Unmap(), Port: rs.Port, Weight: rs.Weight}
	return nil
}

// UpdateRealServer implements ipvs.Interface.
func (f *IPVS) UpdateRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := f.Hit("UpdateRealServer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.lookup(vs)
	if err != nil {
		return err
	}
	cur, ok := s.rss[rs.AddrPort()]
	if !ok {
		return fmt.Errorf("ipvstest: real server %s of %s: %w", rs.AddrPort(), vs, ipvs.ErrNotFound)
	}
	if rs.Weight < 0 {
		return fmt.Errorf("ipvstest: negative weight: %w", ErrInvalid)
	}
	cur.Weight = rs.Weight
	return nil
}

// DeleteRealServer implements ipvs.Interface.
func (f *IPVS) DeleteRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	if err := f.Hit("DeleteRealServer"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.lookup(vs)
	if err != nil {
		return err
	}
	if _, ok := s.rss[rs.AddrPort()]; !ok {
		return fmt.Errorf("ipvstest: real server %s of %s: %w", rs.AddrPort(), vs, ipvs.ErrNotFound)
	}
	delete(s.rss, rs.AddrPort())
	return nil
}

// GetRealServers implements ipvs.Interface (sorted).
func (f *IPVS) GetRealServers(vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error) {
	if err := f.Hit("GetRealServers"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.lookup(vs)
	if err != nil {
		return nil, err
	}
	return sortedRS(s), nil
}

func sortedRS(s *fakeService) []*ipvs.RealServer {
	out := make([]*ipvs.RealServer, 0, len(s.rss))
	for _, rs := range s.rss {
		c := *rs
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *ipvs.RealServer) int { return a.AddrPort().Compare(b.AddrPort()) })
	return out
}

// SetTimeouts implements ipvs.Interface (zero fields unchanged).
func (f *IPVS) SetTimeouts(t ipvs.Timeouts) error {
	if err := f.Hit("SetTimeouts"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.TCP > 0 {
		f.timeouts.TCP = t.TCP
	}
	if t.TCPFin > 0 {
		f.timeouts.TCPFin = t.TCPFin
	}
	if t.UDP > 0 {
		f.timeouts.UDP = t.UDP
	}
	return nil
}

// GetTimeouts implements ipvs.Interface.
func (f *IPVS) GetTimeouts() (ipvs.Timeouts, error) {
	if err := f.Hit("GetTimeouts"); err != nil {
		return ipvs.Timeouts{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.timeouts, nil
}

// Flush implements ipvs.Interface.
func (f *IPVS) Flush() error {
	if err := f.Hit("Flush"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.services)
	return nil
}

// Close implements ipvs.Interface.
func (f *IPVS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// SetConnections sets the connection counters of a real server (what the
// kernel would count), for graceful-termination tests.
func (f *IPVS) SetConnections(vs ipvs.VirtualServerKey, rs netip.AddrPort, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("ipvstest: virtual server %s: %w", vs, ipvs.ErrNotFound)
	}
	r, ok := s.rss[rs]
	if !ok {
		return fmt.Errorf("ipvstest: real server %s of %s: %w", rs, vs, ipvs.ErrNotFound)
	}
	r.ActiveConn, r.InactiveConn = active, inactive
	return nil
}

// Lookup returns a copy of the virtual server key and its real servers.
func (f *IPVS) Lookup(key ipvs.VirtualServerKey) (*ipvs.VirtualServer, []*ipvs.RealServer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.services[key]
	if !ok {
		return nil, nil, false
	}
	c := s.vs
	return &c, sortedRS(s), true
}

// Mutations is the number of calls that change the table.
func (f *IPVS) Mutations() int {
	return f.CallsOf("AddVirtualServer", "UpdateVirtualServer", "DeleteVirtualServer",
		"AddRealServer", "UpdateRealServer", "DeleteRealServer", "Flush")
}

// Deletions is the number of delete calls.
func (f *IPVS) Deletions() int {
	return f.CallsOf("DeleteVirtualServer", "DeleteRealServer", "Flush")
}

func protoWord(p v1.Protocol) string {
	if p == v1.ProtocolSCTP {
		return "SCTP"
	}
	return string(p)
}

// Dump renders the table like `ipvsadm -Ln`, sorted by protocol, address
// and port, real servers by address (Forward is always Masq).
func (f *IPVS) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	for _, s := range f.sorted() {
		fmt.Fprintf(&b, "%-4s %s %s", protoWord(s.vs.Protocol), netip.AddrPortFrom(s.vs.Address, s.vs.Port), s.vs.Scheduler)
		if s.vs.Flags&ipvs.FlagPersistent != 0 {
			fmt.Fprintf(&b, " persistent %d", s.vs.Timeout)
		}
		b.WriteByte('\n')
		for _, rs := range sortedRS(s) {
			fmt.Fprintf(&b, "  -> %-28s Masq    %-6d %-10d %d\n", rs.AddrPort(), rs.Weight, rs.ActiveConn, rs.InactiveConn)
		}
	}
	return b.String()
}

// Load adds the virtual and real servers of a Dump (header lines
// optional) to the table: a way to seed a test with existing state.
func (f *IPVS) Load(dump string) error {
	sc := lines.New([]byte(dump))
	var cur *ipvs.VirtualServer
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(string(sc.Line()))
		if t == "" || strings.HasPrefix(t, "Prot ") || strings.HasPrefix(t, "-> RemoteAddress") || strings.HasPrefix(t, "IP Virtual Server") {
			continue
		}
		fs := strings.Fields(t)
		if fs[0] == "->" {
			if cur == nil || len(fs) < 4 {
				return fmt.Errorf("ipvstest: line %d: real server without virtual server: %q", line, t)
			}
			ap, err := netip.ParseAddrPort(fs[1])
			if err != nil {
				return fmt.Errorf("ipvstest: line %d: %w", line, err)
			}
			w, err := strconv.Atoi(fs[3])
			if err != nil {
				return fmt.Errorf("ipvstest: line %d: weight: %w", line, err)
			}
			rs := &ipvs.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: w}
			if err := f.AddRealServer(cur, rs); err != nil {
				return fmt.Errorf("ipvstest: line %d: %w", line, err)
			}
			if len(fs) >= 6 {
				a, _ := strconv.Atoi(fs[4])
				in, _ := strconv.Atoi(fs[5])
				_ = f.SetConnections(cur.Key(), ap, a, in)
			}
			continue
		}
		if len(fs) < 3 {
			return fmt.Errorf("ipvstest: line %d: want \"PROTO ADDR:PORT SCHEDULER [persistent N]\": %q", line, t)
		}
		ap, err := netip.ParseAddrPort(fs[1])
		if err != nil {
			return fmt.Errorf("ipvstest: line %d: %w", line, err)
		}
		vs := &ipvs.VirtualServer{Address: ap.Addr(), Port: ap.Port(), Protocol: v1.Protocol(strings.ToUpper(fs[0])), Scheduler: fs[2]}
		if len(fs) >= 5 && fs[3] == "persistent" {
			n, err := strconv.Atoi(fs[4])
			if err != nil {
				return fmt.Errorf("ipvstest: line %d: persistence: %w", line, err)
			}
			vs.Flags, vs.Timeout = ipvs.FlagPersistent, uint32(n)
		}
		if err := f.AddVirtualServer(vs); err != nil {
			return fmt.Errorf("ipvstest: line %d: %w", line, err)
		}
		cur = vs
	}
	return nil
}
