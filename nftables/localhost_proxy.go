//go:build linux

package nftables

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// The userspace TCP proxy of localhost node ports (Config.LocalhostNodePorts
// with a loopback node-port address; upstream v1.37's
// pkg/proxy/localnodeportproxy): one listener on 127.0.0.1 (::1) per TCP
// node port that has endpoints, each connection forwarded to an endpoint
// picked at random (ClientIP affinity pins one endpoint for the whole
// listener, every local client having the same address), the bytes copied
// by internal/tcprelay as the userspace engine's are.

// LocalhostSockets is the socket layer of the localhost node-port proxy,
// so tests can open its sockets inside a network namespace.
// userspace.OSSockets (and any userspace.Sockets) is one.
type LocalhostSockets interface {
	// ListenTCP listens on addr.
	ListenTCP(addr netip.AddrPort) (net.Listener, error)
	// DialTCP connects to a backend.
	DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// osLocalhostSockets opens real sockets in the calling thread's network
// namespace.
type osLocalhostSockets struct{}

func (osLocalhostSockets) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	return tcprelay.ListenTCP(tcpNetwork(addr.Addr()), net.TCPAddrFromAddrPort(addr))
}

func (osLocalhostSockets) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, tcpNetwork(addr.Addr()), addr.String())
}

func tcpNetwork(a netip.Addr) string {
	if a.Is4() || a.Is4In6() {
		return "tcp4"
	}
	return "tcp6"
}

// localhostDialTimeout bounds a connection attempt to an endpoint
// (upstream's 5 s).
const localhostDialTimeout = 5 * time.Second

// localhostPortSpec is one TCP node port the proxy serves (planned with
// the service: planLocalhostProxy).
type localhostPortSpec struct {
	nodePort  int
	endpoints []netip.AddrPort // not empty
	affinity  time.Duration    // ClientIP timeout; 0: none
}

// planLocalhostProxy records the port's TCP node port for the proxy:
// its ready endpoints for external traffic (the local ones under
// externalTrafficPolicy Local); none, no listener.
func (p *planner) planLocalhostProxy(sp *servicePlan, pp *portPlan) {
	if !p.localhost.proxy || pp.svc.NodePort() == 0 || pp.svc.Protocol() != v1.ProtocolTCP {
		return
	}
	eps := pp.clusterEndpoints
	if pp.svc.ExternalPolicyLocal() {
		eps = pp.localEndpoints
	}
	if len(eps) == 0 {
		return
	}
	spec := localhostPortSpec{nodePort: pp.svc.NodePort()}
	for _, ep := range eps {
		spec.endpoints = append(spec.endpoints, netip.AddrPortFrom(ep.IP(), uint16(ep.Port())))
	}
	if pp.svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		spec.affinity = time.Duration(pp.svc.StickyMaxAgeSeconds()) * time.Second
	}
	x := sp.extra()
	x.localhostPorts = append(x.localhostPorts, spec)
}

// localhostProxy keeps the listeners. sync runs on the engine's sync
// goroutine (so listeners open in its network namespace); connections are
// served on goroutines of their own, which close waits for.
type localhostProxy struct {
	log     logr.Logger
	family  v1.IPFamily
	ip      netip.Addr // 127.0.0.1 or ::1
	sockets LocalhostSockets
	metrics *metrics.Metrics
	clock   clock.PassiveClock
	pipes   *tcprelay.PipePool

	// specs are the planned ports of each service, as last synced.
	specs map[types.NamespacedName][]localhostPortSpec

	mu        sync.Mutex
	listeners map[int]*localhostListener // by node port
	wg        sync.WaitGroup             // accept loops and connections
}

func newLocalhostProxy(cfg *Config, sockets LocalhostSockets, log logr.Logger) *localhostProxy {
	ip := netip.MustParseAddr("127.0.0.1")
	if cfg.IPFamily == v1.IPv6Protocol {
		ip = netip.IPv6Loopback()
	}
	if sockets == nil {
		sockets = osLocalhostSockets{}
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if cfg.Clock != nil {
		clk = cfg.Clock
	}
	return &localhostProxy{
		log:       log.WithName("localhost-nodeports"),
		family:    cfg.IPFamily,
		ip:        ip,
		sockets:   sockets,
		metrics:   cfg.Metrics,
		clock:     clk,
		pipes:     tcprelay.NewPipePool(nil),
		specs:     map[types.NamespacedName][]localhostPortSpec{},
		listeners: map[int]*localhostListener{},
	}
}

// update records the planned ports of the services named (all of plans
// when all is set) and reconciles the listeners with them.
func (lp *localhostProxy) update(names []types.NamespacedName, plans map[types.NamespacedName]*servicePlan, all bool) {
	if all {
		clear(lp.specs)
		for n, sp := range plans {
			if sp != nil && len(sp.localhostPorts()) > 0 {
				lp.specs[n] = sp.localhostPorts()
			}
		}
	} else {
		for _, n := range names {
			if sp := plans[n]; sp != nil && len(sp.localhostPorts()) > 0 {
				lp.specs[n] = sp.localhostPorts()
			} else {
				delete(lp.specs, n)
			}
		}
	}
	lp.reconcile()
}

// reconcile opens, updates and closes listeners to match specs. Two
// services claiming one node port (the API server refuses it): the first
// by name keeps it.
func (lp *localhostProxy) reconcile() {
	want := map[int]localhostPortSpec{}
	names := make([]types.NamespacedName, 0, len(lp.specs))
	for n := range lp.specs {
		names = append(names, n)
	}
	sortNames(names)
	for _, n := range names {
		for _, s := range lp.specs[n] {
			if _, taken := want[s.nodePort]; !taken {
				want[s.nodePort] = s
			}
		}
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for port, l := range lp.listeners {
		if _, ok := want[port]; !ok {
			lp.log.V(2).Info("Removing localhost node-port proxy", "port", port)
			l.shutdown()
			delete(lp.listeners, port)
		}
	}
	ports := make([]int, 0, len(want))
	for port := range want {
		ports = append(ports, port)
	}
	sort.Ints(ports)
	for _, port := range ports {
		s := want[port]
		if l, ok := lp.listeners[port]; ok {
			l.setSpec(s)
			continue
		}
		addr := netip.AddrPortFrom(lp.ip, uint16(port))
		ln, err := lp.sockets.ListenTCP(addr)
		if err != nil {
			// Retried by the next sync that reconciles (as upstream,
			// whose next sync asks again).
			lp.log.Error(err, "Failed to create localhost node-port proxy", "address", addr.String())
			lp.metrics.IncNFTablesLocalhostNodePortListenerCreationFailures(lp.family)
			continue
		}
		l := &localhostListener{lp: lp, port: port, ln: ln, conns: map[*tcprelay.Pair]struct{}{}}
		l.setSpec(s)
		lp.listeners[port] = l
		lp.wg.Add(1)
		go l.serve()
		lp.log.V(4).Info("Created localhost node-port proxy", "address", addr.String(), "endpoints", len(s.endpoints))
	}
	lp.metrics.SetNFTablesLocalhostNodePortListeners(lp.family, len(lp.listeners))
}

// close shuts every listener and connection and waits for their
// goroutines; the proxy keeps no listener afterwards (a later update
// opens them again).
func (lp *localhostProxy) close() {
	lp.mu.Lock()
	for port, l := range lp.listeners {
		l.shutdown()
		delete(lp.listeners, port)
	}
	lp.mu.Unlock()
	lp.wg.Wait()
	lp.pipes.CloseIdle()
	clear(lp.specs)
	lp.metrics.SetNFTablesLocalhostNodePortListeners(lp.family, 0)
}

// ports lists the node ports listened on, sorted (tests).
func (lp *localhostProxy) ports() []int {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	out := make([]int, 0, len(lp.listeners))
	for port := range lp.listeners {
		out = append(out, port)
	}
	sort.Ints(out)
	return out
}

// localhostListener serves one node port.
type localhostListener struct {
	lp   *localhostProxy
	port int
	ln   net.Listener

	mu       sync.Mutex
	spec     localhostPortSpec
	pinned   netip.AddrPort // the affinity's endpoint (zero: none)
	pinnedAt time.Time
	closed   bool
	conns    map[*tcprelay.Pair]struct{}
}

// setSpec installs a new endpoint set; established connections stay. A
// changed affinity timeout drops the pin (upstream does the same).
func (l *localhostListener) setSpec(s localhostPortSpec) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.affinity != l.spec.affinity {
		l.pinned = netip.AddrPort{}
	}
	l.spec = s
}

// pick chooses the endpoint of a new connection: at random; with
// affinity, the pinned endpoint while it is in the set and was used
// within the timeout (every use renews it).
func (l *localhostListener) pick() netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	eps := l.spec.endpoints
	now := l.lp.clock.Now()
	if l.spec.affinity > 0 && l.pinned.IsValid() && now.Sub(l.pinnedAt) <= l.spec.affinity {
		for _, ep := range eps {
			if ep == l.pinned {
				l.pinnedAt = now
				return ep
			}
		}
	}
	ep := eps[rand.IntN(len(eps))]
	if l.spec.affinity > 0 {
		l.pinned, l.pinnedAt = ep, now
	}
	return ep
}

func (l *localhostListener) serve() {
	defer l.lp.wg.Done()
	delay := time.Duration(0)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: back off (bounded).
			l.lp.log.V(4).Info("Accept error on localhost node-port proxy", "port", l.port, "err", err)
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			time.Sleep(delay)
			continue
		}
		delay = 0
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.lp.wg.Add(1)
		l.mu.Unlock()
		go l.handle(c)
	}
}

// handle forwards one accepted connection; a failed dial closes the
// client's connection (as upstream).
func (l *localhostListener) handle(client net.Conn) {
	defer l.lp.wg.Done()
	ep := l.pick()
	ctx, cancel := context.WithTimeout(context.Background(), localhostDialTimeout)
	backend, err := l.lp.sockets.DialTCP(ctx, ep)
	cancel()
	if err != nil {
		l.lp.log.V(4).Info("Failed to connect to endpoint", "port", l.port, "endpoint", ep.String(), "err", err)
		client.Close()
		return
	}
	pair := &tcprelay.Pair{Client: client, Backend: backend, Pipes: l.lp.pipes}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		pair.CloseBoth()
		return
	}
	l.conns[pair] = struct{}{}
	l.mu.Unlock()
	pair.Run()
	l.mu.Lock()
	delete(l.conns, pair)
	l.mu.Unlock()
}

// shutdown stops accepting and closes the listener's connections (a
// node port that is gone, or the proxier closing).
func (l *localhostListener) shutdown() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*tcprelay.Pair, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	l.ln.Close()
	for _, c := range conns {
		c.CloseBoth()
	}
}
