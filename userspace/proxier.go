package userspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/runner"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// fullRewritePeriod: capture chains are rewritten in full at least this
// often, repairing rules someone else changed.
const fullRewritePeriod = time.Hour

// Proxier is the userspace engine: a proxy.Provider that serves every
// service port from sockets of its own and copies each connection (or UDP
// flow) to an endpoint chosen by its LoadBalancer. Create it with New;
// release its sockets and goroutines with Close; remove its iptables rules
// with Cleanup.
type Proxier struct {
	*changetracker.Tracker

	cfg    Config
	log    logr.Logger
	lb     LoadBalancer
	hostIP netip.Addr
	runner *runner.Runner

	counters counters

	// Shutdown: closed is set once; closing is closed with it.
	goMu          sync.Mutex
	closed        atomic.Bool
	closing       chan struct{}
	closingCtx    context.Context
	cancelClosing context.CancelFunc
	wg            sync.WaitGroup

	// syncMu serialises Sync, Close and readers of the state below.
	syncMu    sync.Mutex
	services  map[proxy.ServicePortName]*serviceState
	skipped   map[proxy.ServicePortName]error // service ports not served (SCTP)
	failing   map[proxy.ServicePortName]bool  // service ports whose last apply failed
	planned   bool                            // a first, full plan was made
	lastPlans int                             // service ports planned by the last sync
	tcpPorts  *portAllocator
	udpPorts  *portAllocator

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

	// Capture rules: written holds each service port's rules as they are
	// in the kernel after the last successful write; dirty the service
	// ports whose rules may have changed since. rulesValid false (at
	// start, after a failed write, after Cleanup) forces a full rewrite of
	// our chains; otherwise only dirty services are rewritten, with -D/-A
	// lines (rules of different services never depend on their order).
	written       map[proxy.ServicePortName][]captureRule
	dirty         map[proxy.ServicePortName]bool
	rulesValid    bool
	lastFullWrite time.Time
	ruleCount     map[iptables.Table]int
	restoreBf     bytes.Buffer
	// staleUDP are conntrack filters still to be applied (retried until done).
	staleUDP []ConntrackFilter

	// Established connections and UDP flows, for grace-period closing.
	activeMu sync.Mutex
	active   map[*activeConn]struct{}
	timers   map[clock.Timer]struct{}
}

var _ proxy.Provider = (*Proxier)(nil)

// activeConn is one proxied TCP connection or UDP flow.
type activeConn struct {
	key     BalancerKey
	backend netip.AddrPort
	close   func()
}

// proxySocket is a TCP or UDP proxy socket.
type proxySocket interface {
	Addr() netip.AddrPort
	Key() BalancerKey
	Close()
}

type listenerState struct {
	id        listenerID
	sock      proxySocket
	allocated int // proxy port to release, 0 if none
}

type serviceState struct {
	plan      *servicePlan
	listeners map[listenerID]*listenerState
	err       error // why the service is not (fully) served; retried each sync
}

// ServiceError says why one service port is not (fully) served; the rest of
// the node is. Sync returns them joined; test with errors.As.
type ServiceError struct {
	Service proxy.ServicePortName
	Err     error
}

func (e *ServiceError) Error() string { return fmt.Sprintf("service %s: %v", e.Service, e.Err) }
func (e *ServiceError) Unwrap() error { return e.Err }

// New validates cfg and returns a Proxier. Nothing is opened or written
// before the first successful Sync.
func New(cfg Config) (*Proxier, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxier{
		cfg:       cfg,
		log:       cfg.Logger.WithValues("proxier", "userspace", "ipFamily", cfg.IPFamily),
		lb:        cfg.LoadBalancer,
		hostIP:    cfg.HostIP.Unmap(),
		closing:   make(chan struct{}),
		services:  map[proxy.ServicePortName]*serviceState{},
		byService: map[types.NamespacedName][]proxy.ServicePortName{},
		skipped:   map[proxy.ServicePortName]error{},
		failing:   map[proxy.ServicePortName]bool{},
		written:   map[proxy.ServicePortName][]captureRule{},
		dirty:     map[proxy.ServicePortName]bool{},
		ruleCount: map[iptables.Table]int{},
		tcpPorts:  newPortAllocator(cfg.PortRange),
		udpPorts:  newPortAllocator(cfg.PortRange),
		active:    map[*activeConn]struct{}{},
		timers:    map[clock.Timer]struct{}{},
	}
	p.closingCtx, p.cancelClosing = context.WithCancel(context.Background())
	if cfg.Capture == CaptureIPTables && cfg.ListenAddress.IsUnspecified() && !p.hostIP.IsValid() {
		p.hostIP = detectHostIP(cfg.IPFamily == v1.IPv6Protocol)
		if !p.hostIP.IsValid() {
			p.log.Info("No host IP found; node-originated traffic will be REDIRECTed (UDP replies may carry the wrong source)")
		}
	}
	p.runner = runner.New("userspace-"+string(cfg.IPFamily), p.runSync, runner.Config{
		MinInterval: cfg.MinSyncPeriod,
		MaxInterval: cfg.SyncPeriod,
		Clock:       cfg.Clock,
		Logger:      p.log,
	})
	p.Tracker = changetracker.New(changetracker.Config{
		IPFamily:         cfg.IPFamily,
		NodeName:         cfg.NodeName,
		ServiceProxyName: cfg.ServiceProxyName,
		Filter:           cfg.EndpointFilter,
		Logger:           cfg.Logger,
		OnChange:         func(changetracker.Change) { p.runner.Trigger() },
	})
	return p, nil
}

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

// Run syncs whenever the tracker reports a change (at most every
// MinSyncPeriod), at least every SyncPeriod, and retries failed syncs,
// until ctx ends. It does not close the proxier: call Close after it returns.
func (p *Proxier) Run(ctx context.Context) error {
	p.runner.Trigger()
	return p.runner.Run(ctx)
}

func (p *Proxier) runSync(ctx context.Context) error {
	if !p.Tracker.Synced() || p.closed.Load() {
		return nil // OnChange triggers again once the initial lists are in
	}
	return p.Sync(ctx)
}

// Sync applies every change handed to the handlers so far: proxy sockets
// are opened and closed, balancers updated and, in CaptureIPTables mode, the
// capture rules rewritten. It returns proxy.ErrNotSynced before the initial
// lists were delivered, ErrClosed after Close, the iptables error if the
// rules could not be written (the next Sync rewrites them all), and
// otherwise the joined *ServiceError of service ports that could not be
// served (every other service is served; failed ones are retried by each
// Sync).
func (p *Proxier) Sync(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if !p.Tracker.Synced() {
		return proxy.ErrNotSynced
	}
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	if p.closed.Load() {
		return ErrClosed
	}
	start := p.cfg.Clock.Now()
	u := p.Tracker.Update()
	p.count(counterSyncs)
	err := p.apply(ctx, u)
	if err != nil {
		p.count(counterSyncErrors)
	}
	if m := p.cfg.Metrics; m != nil {
		fam := p.cfg.IPFamily
		m.ObserveSync(fam, p.cfg.Clock.Since(start))
		if err == nil {
			m.SetLastSync(fam, p.cfg.Clock.Now())
		}
		m.SetNoLocalEndpoints(fam, metrics.TrafficPolicyInternal, p.noLocalInternal)
		m.SetNoLocalEndpoints(fam, metrics.TrafficPolicyExternal, p.noLocalExternal)
	}
	return err
}

// apply brings sockets, balancers and rules to the state planned from the
// maps. Caller holds syncMu.
func (p *Proxier) apply(ctx context.Context, u changetracker.Update) error {
	pp := planParams{
		capture: p.cfg.Capture, listen: p.cfg.ListenAddress, nodeName: p.cfg.NodeName, nodeLabels: u.NodeLabels,
		clusterCIDRs: p.cfg.ClusterCIDRs,
	}
	// Only services the update changed are planned again, unless the node's
	// topology labels changed (endpoint selection may change everywhere),
	// this is the first sync, or the service failed last time. A partial
	// sync finds the changed ports through the tracker's index of ports by
	// service, so its cost follows the change, not the number of services.
	full := !p.planned || u.NodeChanged
	plans := map[proxy.ServicePortName]*servicePlan{}
	p.lastPlans = 0
	planOne := func(name proxy.ServicePortName, svc proxy.ServicePort) {
		p.lastPlans++
		plan, err := planService(name, svc, u.Endpoints[name], pp)
		if err != nil {
			if p.skipped[name] == nil {
				p.count(counterSkippedProtocol)
				p.log.Info("Not serving service port", "service", name, "protocol", svc.Protocol(), "reason", err)
			}
			p.skipped[name] = err
			return
		}
		delete(p.skipped, name)
		plans[name] = plan
	}
	if full {
		for name, svc := range u.Services {
			planOne(name, svc)
		}
	} else {
		for nn := range u.ChangedServices {
			for _, name := range u.ServicePorts[nn] {
				// u.Services is the filtered view: a port out of scope is
				// not planned (and is torn down below).
				if svc, ok := u.Services[name]; ok {
					planOne(name, svc)
				}
			}
		}
		// Failing ports are retried whether or not their service changed.
		for name := range p.failing {
			if u.ChangedServices.Has(name.NamespacedName) {
				continue // planned above
			}
			if svc, ok := u.Services[name]; ok {
				planOne(name, svc)
			}
		}
	}
	// Only a changed service can have lost a skipped port.
	for name := range p.skipped {
		if !full && !u.ChangedServices.Has(name.NamespacedName) {
			continue
		}
		if _, ok := u.Services[name]; !ok {
			delete(p.skipped, name)
		}
	}
	p.planned = true

	// Tear down the ports that vanished (from the tracker or from the
	// filtered view), became skipped or changed protocol. Only a changed
	// service can have lost a port; its old ports come from byService,
	// since the tracker no longer lists the ones that left.
	teardown := p.teardownBuf[:0]
	if full {
		for name := range p.services {
			teardown = append(teardown, name)
		}
	} else {
		for nn := range u.ChangedServices {
			teardown = append(teardown, p.byService[nn]...)
		}
	}
	for _, name := range teardown {
		st := p.services[name]
		_, present := u.Services[name]
		if plan, replanned := plans[name]; !present || p.skipped[name] != nil || replanned && plan.protocol != st.plan.protocol {
			p.staleUDP = conntrackFilters(st.plan, p.staleUDP)
			p.teardownService(st)
			p.removeService(name)
			delete(p.failing, name)
			p.dirty[name] = true
		}
	}
	clear(teardown)
	p.teardownBuf = teardown[:0]

	var errs []error
	for name, plan := range plans {
		st := p.services[name]
		if st == nil {
			st = &serviceState{listeners: map[listenerID]*listenerState{}}
			p.addService(name, st)
		}
		if st.err == nil && st.plan != nil && plansEqual(st.plan, plan) {
			continue
		}
		// The capture rules depend on the rule plan and the proxy ports:
		// endpoint-only changes (the common case) leave them alone.
		if st.plan == nil || st.err != nil || !slices.Equal(st.plan.rules, plan.rules) || !slices.Equal(st.plan.listeners, plan.listeners) {
			p.dirty[name] = true
		}
		if st.plan == nil || !slices.Equal(st.plan.rules, plan.rules) {
			p.staleUDP = conntrackFilters(st.plan, p.staleUDP)
			p.staleUDP = conntrackFilters(plan, p.staleUDP)
		}
		p.applyFrontends(st.plan, plan)
		st.err = p.applyListeners(st, plan)
		p.setPlan(st, plan)
		if st.err != nil {
			p.failing[name] = true
		} else {
			delete(p.failing, name)
		}
		if st.err != nil {
			p.count(counterServiceErrors)
			p.log.Error(st.err, "Service port not fully served", "service", name)
			errs = append(errs, &ServiceError{Service: name, Err: st.err})
		}
	}
	p.lb.CleanupStale()

	// A full rewrite now and then repairs rules changed behind our back.
	fullRules := full || p.cfg.Clock.Since(p.lastFullWrite) >= fullRewritePeriod
	if p.cfg.Capture == CaptureIPTables && (len(p.dirty) > 0 || !p.rulesValid || fullRules) {
		if err := p.syncRules(ctx, fullRules); err != nil {
			return errors.Join(append([]error{err}, errs...)...)
		}
	}
	if len(p.staleUDP) > 0 {
		if p.cfg.Capture != CaptureIPTables || p.cfg.Conntrack == nil {
			p.staleUDP = p.staleUDP[:0]
		} else if n, err := p.cfg.Conntrack.DeleteUDP(p.cfg.IPFamily == v1.IPv6Protocol, p.staleUDP); err != nil {
			errs = append(errs, fmt.Errorf("userspace: deleting stale UDP conntrack entries: %w", err))
		} else {
			p.log.V(2).Info("Deleted stale UDP conntrack entries", "filters", len(p.staleUDP), "entries", n)
			p.staleUDP = p.staleUDP[:0]
		}
	}
	return errors.Join(errs...)
}

// addService records st as name's state; name must have none.
func (p *Proxier) addService(name proxy.ServicePortName, st *serviceState) {
	p.services[name] = st
	p.byService[name.NamespacedName] = append(p.byService[name.NamespacedName], name)
	if st.plan != nil {
		p.countNoLocal(st.plan, 1)
	}
}

// removeService forgets name's state (its sockets must be closed already).
func (p *Proxier) removeService(name proxy.ServicePortName) {
	st := p.services[name]
	if st == nil {
		return
	}
	if st.plan != nil {
		p.countNoLocal(st.plan, -1)
	}
	delete(p.services, name)
	nn := name.NamespacedName
	ports := slices.DeleteFunc(p.byService[nn], func(n proxy.ServicePortName) bool { return n == name })
	if len(ports) == 0 {
		delete(p.byService, nn)
	} else {
		p.byService[nn] = ports
	}
}

// setPlan makes plan st's current plan.
func (p *Proxier) setPlan(st *serviceState, plan *servicePlan) {
	if st.plan != nil {
		p.countNoLocal(st.plan, -1)
	}
	st.plan = plan
	p.countNoLocal(plan, 1)
}

func (p *Proxier) countNoLocal(plan *servicePlan, delta int) {
	if plan.noLocalInternal {
		p.noLocalInternal += delta
	}
	if plan.noLocalExternal {
		p.noLocalExternal += delta
	}
}

func plansEqual(a, b *servicePlan) bool {
	return a.name == b.name && a.protocol == b.protocol &&
		slices.EqualFunc(a.frontends, b.frontends, func(x, y frontendPlan) bool {
			return x.key == y.key && x.affinity == y.affinity && x.drop == y.drop && slices.Equal(x.endpoints, y.endpoints)
		}) &&
		slices.Equal(a.listeners, b.listeners) && slices.Equal(a.rules, b.rules)
}

// applyFrontends updates the balancer. TCP connections to endpoints that
// left (or to a set that went away) are closed after the grace period; UDP
// flows to them at once (a datagram has nothing to finish, and the client's
// next one must reach a current endpoint).
func (p *Proxier) applyFrontends(old, plan *servicePlan) {
	for _, f := range plan.frontends {
		before := p.lb.Endpoints(f.key)
		p.lb.Update(f.key, f.endpoints, f.affinity)
		for _, ep := range before {
			if !slices.Contains(f.endpoints, ep) {
				if plan.protocol == v1.ProtocolUDP {
					p.closeStale(f.key)
				} else {
					p.scheduleGraceClose(f.key)
				}
				break
			}
		}
	}
	if old == nil {
		return
	}
	for _, f := range old.frontends {
		if !slices.ContainsFunc(plan.frontends, func(n frontendPlan) bool { return n.key == f.key }) {
			p.lb.Delete(f.key)
			p.scheduleGraceClose(f.key)
		}
	}
}

// applyListeners opens and closes the proxy sockets of one service port.
func (p *Proxier) applyListeners(st *serviceState, plan *servicePlan) error {
	for id, ls := range st.listeners {
		if !slices.Contains(plan.listeners, id) {
			p.closeListener(ls)
			delete(st.listeners, id)
		}
	}
	var errs []error
	for _, id := range plan.listeners {
		if st.listeners[id] != nil {
			continue
		}
		ls, err := p.openListener(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.listeners[id] = ls
	}
	return errors.Join(errs...)
}

func (p *Proxier) openListener(id listenerID) (*listenerState, error) {
	start := func(bind netip.AddrPort) (proxySocket, error) {
		if id.protocol == v1.ProtocolUDP {
			u, err := p.startUDP(id.key, bind)
			if err != nil {
				return nil, err
			}
			return u, nil
		}
		t, err := p.startTCP(id.key, bind)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	ls := &listenerState{id: id}
	if id.kind == listenFixed {
		sock, err := start(id.bind)
		if err != nil {
			return nil, fmt.Errorf("listening on %s/%s: %w", id.bind, id.protocol, err)
		}
		ls.sock = sock
		return ls, nil
	}
	alloc := p.tcpPorts
	if id.protocol == v1.ProtocolUDP {
		alloc = p.udpPorts
	}
	var sock proxySocket
	addr, err := alloc.bind(func(port int) (netip.AddrPort, error) {
		s, err := start(netip.AddrPortFrom(p.cfg.ListenAddress, uint16(port)))
		if err != nil {
			return netip.AddrPort{}, err
		}
		sock = s
		return s.Addr(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s proxy socket on %s: %w", id.protocol, p.cfg.ListenAddress, err)
	}
	ls.sock = sock
	if p.cfg.PortRange.Size() > 0 {
		ls.allocated = int(addr.Port())
	}
	return ls, nil
}

func (p *Proxier) closeListener(ls *listenerState) {
	ls.sock.Close()
	if ls.allocated != 0 {
		if ls.id.protocol == v1.ProtocolUDP {
			p.udpPorts.release(ls.allocated)
		} else {
			p.tcpPorts.release(ls.allocated)
		}
	}
}

func (p *Proxier) teardownService(st *serviceState) {
	for id, ls := range st.listeners {
		p.closeListener(ls)
		delete(st.listeners, id)
	}
	for _, f := range st.plan.frontends {
		p.lb.Delete(f.key)
		p.scheduleGraceClose(f.key)
	}
}

// serviceRules resolves one service port's capture rules from its plan
// and open sockets (nil for a service that is gone).
func (p *Proxier) serviceRules(name proxy.ServicePortName) []captureRule {
	st := p.services[name]
	if st == nil {
		return nil
	}
	ports := make(map[listenerID]int, len(st.listeners))
	for id, ls := range st.listeners {
		ports[id] = int(ls.sock.Addr().Port())
	}
	return resolveRules(st.plan, ports, p.cfg.ListenAddress, p.hostIP)
}

// syncRules writes the capture rules: everything (our chains declared,
// hence flushed, and refilled) when full or when the last write failed,
// otherwise -D/-A lines for the dirty service ports only.
func (p *Proxier) syncRules(ctx context.Context, full bool) error {
	p.restoreBf.Reset()
	written := map[proxy.ServicePortName][]captureRule{}
	if full || !p.rulesValid {
		var all []captureRule
		for name := range p.services {
			if rules := p.serviceRules(name); len(rules) > 0 {
				written[name] = rules
				all = append(all, rules...)
			}
		}
		sortRules(all)
		if err := ensureJumps(ctx, p.cfg.IPTables); err != nil {
			p.rulesValid = false
			return fmt.Errorf("userspace: installing capture chains: %w", err)
		}
		renderRestore(&p.restoreBf, all)
	} else {
		var del, add []captureRule
		for name := range p.dirty {
			rules := p.serviceRules(name)
			if old := p.written[name]; !slices.EqualFunc(old, rules, captureRule.equal) {
				del = append(del, old...)
				add = append(add, rules...)
			}
			written[name] = rules
		}
		if len(del) == 0 && len(add) == 0 {
			clear(p.dirty)
			return nil
		}
		renderChanges(&p.restoreBf, del, add)
	}
	if err := p.cfg.IPTables.Restore(ctx, p.restoreBf.Bytes()); err != nil {
		p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
		p.rulesValid = false
		return fmt.Errorf("userspace: writing capture rules: %w", err)
	}
	if full || !p.rulesValid {
		clear(p.written)
		clear(p.ruleCount)
	}
	for name, rules := range written {
		for _, r := range p.written[name] {
			p.ruleCount[r.table]--
		}
		for _, r := range rules {
			p.ruleCount[r.table]++
		}
		if len(rules) == 0 {
			delete(p.written, name)
		} else {
			p.written[name] = rules
		}
	}
	if full || !p.rulesValid {
		p.lastFullWrite = p.cfg.Clock.Now()
	}
	clear(p.dirty)
	p.rulesValid = true
	p.cfg.Metrics.SetIPTablesRules(p.cfg.IPFamily, metrics.TableNAT, p.ruleCount[iptables.TableNAT])
	p.cfg.Metrics.SetIPTablesRules(p.cfg.IPFamily, metrics.TableFilter, p.ruleCount[iptables.TableFilter])
	return nil
}

// Capture returns the proxier's capture mode (after defaults).
func (p *Proxier) Capture() CaptureMode { return p.cfg.Capture }

// ListenAddress returns the address proxy sockets bind (after defaults).
func (p *Proxier) ListenAddress() netip.Addr { return p.cfg.ListenAddress }

// Cleanup removes the capture rules and chains (CaptureIPTables only).
// Sockets stay open until Close; a later Sync writes the rules again.
func (p *Proxier) Cleanup(ctx context.Context) error {
	if p.cfg.Capture != CaptureIPTables {
		return nil
	}
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	p.rulesValid = false
	return CleanupLeftovers(ctx, p.cfg.IPTables)
}

// Close closes every proxy socket, proxied connection and UDP flow, and
// waits for every goroutine the proxier started. It leaves iptables rules
// alone (see Cleanup). Sync returns ErrClosed afterwards. Close is
// idempotent.
func (p *Proxier) Close() error {
	p.goMu.Lock()
	if p.closed.Load() {
		p.goMu.Unlock()
		return nil
	}
	p.closed.Store(true)
	close(p.closing)
	p.cancelClosing()
	p.goMu.Unlock()

	p.syncMu.Lock()
	for name, st := range p.services {
		for _, ls := range st.listeners {
			p.closeListener(ls)
		}
		p.removeService(name)
	}
	p.syncMu.Unlock()

	p.activeMu.Lock()
	for t := range p.timers {
		t.Stop()
	}
	clear(p.timers)
	conns := make([]*activeConn, 0, len(p.active))
	for ac := range p.active {
		conns = append(conns, ac)
	}
	p.activeMu.Unlock()
	for _, ac := range conns {
		ac.close()
	}
	p.wg.Wait()
	return nil
}

// goTracked runs fn in a goroutine that Close waits for; false after Close.
func (p *Proxier) goTracked(fn func()) bool {
	p.goMu.Lock()
	if p.closed.Load() {
		p.goMu.Unlock()
		return false
	}
	p.wg.Add(1)
	p.goMu.Unlock()
	go func() {
		defer p.wg.Done()
		fn()
	}()
	return true
}

func (p *Proxier) register(ac *activeConn) bool {
	p.activeMu.Lock()
	defer p.activeMu.Unlock()
	if p.closed.Load() {
		return false
	}
	p.active[ac] = struct{}{}
	return true
}

func (p *Proxier) unregister(ac *activeConn) {
	p.activeMu.Lock()
	delete(p.active, ac)
	p.activeMu.Unlock()
}

// scheduleGraceClose closes, after the grace period, the connections of key
// whose endpoint is not in key's set by then.
func (p *Proxier) scheduleGraceClose(key BalancerKey) {
	if p.cfg.EndpointCloseGracePeriod < 0 {
		return
	}
	p.activeMu.Lock()
	defer p.activeMu.Unlock()
	if p.closed.Load() {
		return
	}
	if dc, ok := p.cfg.Clock.(clock.WithDelayedExecution); ok {
		var t clock.Timer
		t = dc.AfterFunc(p.cfg.EndpointCloseGracePeriod, func() {
			p.activeMu.Lock()
			delete(p.timers, t)
			p.activeMu.Unlock()
			p.goTracked(func() { p.closeStale(key) })
		})
		p.timers[t] = struct{}{}
		return
	}
	// A clock without AfterFunc: wait in a goroutine that Close ends.
	t := p.cfg.Clock.NewTimer(p.cfg.EndpointCloseGracePeriod)
	p.goTracked(func() {
		defer t.Stop()
		select {
		case <-t.C():
			p.closeStale(key)
		case <-p.closing:
		}
	})
}

// closeStale closes key's connections to endpoints no longer in its set.
func (p *Proxier) closeStale(key BalancerKey) {
	current := p.lb.Endpoints(key)
	var stale []*activeConn
	p.activeMu.Lock()
	for ac := range p.active {
		if ac.key == key && !slices.Contains(current, ac.backend) {
			stale = append(stale, ac)
		}
	}
	p.activeMu.Unlock()
	for _, ac := range stale {
		p.log.V(2).Info("Closing connection to removed endpoint", "service", key, "endpoint", ac.backend)
		p.count(counterGraceClosed)
		ac.close()
	}
}

// Listener describes one open proxy socket.
type Listener struct {
	Service proxy.ServicePortName
	// Local: this socket serves the service's local endpoint set (the
	// traffic a Local traffic policy applies to); otherwise the cluster set.
	Local    bool
	Protocol v1.Protocol
	// Addr is the bound address: ListenAddress and a proxy port, a node
	// port, or (CaptureBind) a service address.
	Addr netip.AddrPort
	// Endpoints are the endpoints connections through it are sent to, sorted.
	Endpoints []netip.AddrPort
	// Affinity is the set's session affinity.
	Affinity Affinity
}

// Listeners returns every open proxy socket, sorted by service, protocol,
// set (cluster first), then address.
func (p *Proxier) Listeners() []Listener {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	var out []Listener
	for name, st := range p.services {
		for _, ls := range st.listeners {
			key := ls.sock.Key()
			aff, _ := p.lb.Affinity(key)
			out = append(out, Listener{Service: name, Local: key.Local, Protocol: ls.id.protocol,
				Addr: ls.sock.Addr(), Endpoints: p.lb.Endpoints(key), Affinity: aff})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].Service.String(), out[j].Service.String(); a != b {
			return a < b
		}
		if out[i].Protocol != out[j].Protocol {
			return out[i].Protocol < out[j].Protocol
		}
		if out[i].Local != out[j].Local {
			return !out[i].Local
		}
		return out[i].Addr.Compare(out[j].Addr) < 0
	})
	return out
}

// ProxyAddr returns the address of the proxy socket (at a proxy port, not
// a node port or service address) serving name's cluster endpoint set, or
// with local its local set (see Listener.Local). In CaptureNone mode this
// is where clients connect. ok is false when there is no such socket.
func (p *Proxier) ProxyAddr(name proxy.ServicePortName, local bool) (addr netip.AddrPort, ok bool) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	st := p.services[name]
	if st == nil {
		return netip.AddrPort{}, false
	}
	for id, ls := range st.listeners {
		if id.kind == listenProxyPort && id.key.Local == local {
			return ls.sock.Addr(), true
		}
	}
	return netip.AddrPort{}, false
}

// udpFlows returns the live UDP flows (client → endpoint) of a service port's sockets.
func (p *Proxier) udpFlows(name proxy.ServicePortName) map[netip.AddrPort]netip.AddrPort {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	out := map[netip.AddrPort]netip.AddrPort{}
	if st := p.services[name]; st != nil {
		for _, ls := range st.listeners {
			if u, ok := ls.sock.(*udpProxy); ok {
				for c, b := range u.Flows() {
					out[c] = b
				}
			}
		}
	}
	return out
}
