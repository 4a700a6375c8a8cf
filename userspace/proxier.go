package userspace

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Proxier is the userspace engine: a proxy.Provider that serves every
// service port from sockets of its own and copies each connection (or UDP
// flow) to an endpoint chosen by its LoadBalancer. Its exported methods
// are the engine base's (handlers, Sync, Run, DryRun, Cleanup, Close,
// Stats, ...); what is particular to this engine is read through the
// package-level functions Listeners, ProxyAddr, Counters and ConfigOf.
//
// The state is kept by concern: the service ports' plans and sockets
// (apply.go, listeners.go; guarded by the base, which never runs two hooks
// at once, and by stateMu for readers outside a sync), the capture rules
// written (rules.go), and the established connections (connections.go,
// under their own lock, since the data path runs outside syncs).
type Proxier struct {
	*engine.Base

	cfg    Config
	ifs    Interfaces
	log    logr.Logger
	lb     LoadBalancer
	hostIP netip.Addr

	counters counters
	svc      serviceTable
	rules    ruleState
	conns    connTracker

	// stateMu lets readers outside a sync (Listeners, ProxyAddr, the
	// tracer) see svc consistently; the apply hook holds it while it
	// changes sockets and plans.
	stateMu sync.Mutex
}

var _ proxy.Provider = (*Proxier)(nil)

// serviceTable is the state of every served service port.
type serviceTable struct {
	services map[proxy.ServicePortName]*serviceState
	skipped  map[proxy.ServicePortName]error // service ports not served (SCTP)
	failing  map[proxy.ServicePortName]bool  // service ports whose last apply failed
	// failedServicesOnly: the last sync failed only because of service
	// ports that could not be served (their sockets), not because of the
	// capture rules; the next sync, although full for the base, replans
	// only what changed and the failing ports.
	failedServicesOnly bool
	lastPlans          int // service ports planned by the last sync
	tcpPorts, udpPorts *portAllocator

	// byService indexes services by service: the ports of each service
	// that have state. A partial sync finds there the ports a changed
	// service had, including those the tracker no longer lists. Change
	// services only through addService and removeService.
	byService map[types.NamespacedName][]proxy.ServicePortName
	// noLocalInternal / noLocalExternal count the service ports whose plan
	// has that flag set (the no_local_endpoints metric), kept by
	// addService, setPlan and removeService rather than recounted.
	noLocalInternal, noLocalExternal int
	teardownBuf                      []proxy.ServicePortName // scratch, reused across syncs
	// staleUDP are conntrack filters of capture-rule changes not yet
	// handed to the base (kept across failed syncs).
	staleUDP []conntrack.Filter
}

type serviceState struct {
	plan      *servicePlan
	listeners map[listenerID]*listenerState
	err       error // why the service is not (fully) served; retried each sync
}

// ruleState is what the capture rules look like in the kernel.
type ruleState struct {
	// written holds each service port's rules as they are in the kernel
	// after the last successful write; dirty the service ports whose rules
	// may have changed since. valid false (at start, after a failed write,
	// after Cleanup) forces a full rewrite of our chains; otherwise only
	// dirty services are rewritten, with -D/-A lines (rules of different
	// services never depend on their order).
	written map[proxy.ServicePortName][]captureRule
	dirty   map[proxy.ServicePortName]bool
	valid   bool
	count   map[xtables.Table]int
	buf     bytes.Buffer
}

// NewProxier validates cfg and ifs and returns a Proxier. Nothing is
// opened or written before the first successful Sync.
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	cfg, ifs, err := cfg.withDefaults(ifs)
	if err != nil {
		return nil, err
	}
	p := &Proxier{
		cfg:    cfg,
		ifs:    ifs,
		log:    cfg.Logger.WithValues("proxier", "userspace", "ipFamily", cfg.IPFamily),
		lb:     cfg.LoadBalancer,
		hostIP: cfg.HostIP,
		svc: serviceTable{
			services:  map[proxy.ServicePortName]*serviceState{},
			byService: map[types.NamespacedName][]proxy.ServicePortName{},
			skipped:   map[proxy.ServicePortName]error{},
			failing:   map[proxy.ServicePortName]bool{},
			tcpPorts:  newPortAllocator(cfg.PortRange),
			udpPorts:  newPortAllocator(cfg.PortRange),
		},
		rules: ruleState{
			written: map[proxy.ServicePortName][]captureRule{},
			dirty:   map[proxy.ServicePortName]bool{},
			count:   map[xtables.Table]int{},
		},
	}
	p.conns.init(cfg.Clock)
	if cfg.Capture == CaptureIPTables && cfg.ListenAddress.IsUnspecified() && !p.hostIP.IsValid() {
		if p.hostIP = cfg.NodeIP(); !p.hostIP.IsValid() {
			p.hostIP = detectHostIP(cfg.IPFamily == v1.IPv6Protocol)
		}
		if !p.hostIP.IsValid() {
			p.log.Info("No host IP found; node-originated traffic will be REDIRECTed (UDP replies may carry the wrong source)")
		}
	}
	hooks := engine.Hooks{
		Name:   "userspace",
		Apply:  p.apply,
		DryRun: p.dryRun,
		Close:  p.close,
	}
	if cfg.Capture == CaptureIPTables {
		hooks.Drifted = p.drifted
		hooks.Cleanup = p.cleanup
	}
	if p.Base, err = engine.New(cfg.Common, hooks); err != nil {
		return nil, err
	}
	return p, nil
}

// ConfigOf returns the configuration p runs with (defaults applied).
func ConfigOf(p *Proxier) Config { return p.cfg }

// detectHostIP returns the first global unicast address of the family on
// the interfaces of the current network namespace.
func detectHostIP(want6 bool) netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() == want6 && ip.IsGlobalUnicast() {
			return ip
		}
	}
	return netip.Addr{}
}

// cleanup is Hooks.Cleanup (CaptureIPTables only): it removes the capture
// rules and chains. Sockets stay open until Close; the next sync (full)
// writes the rules again.
func (p *Proxier) cleanup(ctx context.Context) error {
	p.rules.valid = false
	return CleanupLeftovers(ctx, p.ifs.IPTables)
}

// close is Hooks.Close: it closes every proxy socket, proxied connection
// and UDP flow, and waits for every goroutine the proxier started. It
// leaves iptables rules alone (see Cleanup).
func (p *Proxier) close() error {
	p.conns.shutdown()
	p.stateMu.Lock()
	for name, st := range p.svc.services {
		for _, ls := range st.listeners {
			p.closeListener(ls)
		}
		p.removeService(name)
	}
	p.stateMu.Unlock()
	p.conns.closeAll()
	return nil
}
