package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/runner"
	"github.com/svcproxy/svcproxy/proxy"
)

// Proxier is the IPVS engine: a proxy.Provider that programs virtual
// servers, kube-ipvs0 addresses, ipsets and a fixed iptables ruleset.
type Proxier struct {
	*changetracker.Tracker

	cfg      Config
	ifs      Interfaces
	log      logr.Logger
	clock    clock.WithTicker
	runner   *runner.Runner
	sets     setNames
	setSpecs map[string]Set

	mu sync.Mutex // serializes syncs; guards everything below
	// plans are the last computed plans of every service port, byName
	// indexes them by service.
	plans  map[proxy.ServicePortName]*servicePlan
	byName map[types.NamespacedName][]proxy.ServicePortName
	// dp is what we believe the kernel holds (after the last sync).
	dp *dataplane
	// owned are the virtual servers this proxier created and has not yet
	// seen deleted: a failed delete stays ours even after its address is
	// unbound.
	owned         map[VirtualServerKey]struct{}
	graceful      *gracefulQueue
	nodePortAddrs []netip.Addr
	needFull      bool
	// planned: plans and dp hold every service (a full replan happened).
	planned   bool
	lastFull  time.Time
	setupDone bool
	rulesBuf  bytes.Buffer
	// conntrackFilters collects UDP flows to clear after an apply.
	conntrackFilters []conntrack.Filter
	stats            SyncStats
}

// SyncStats describes the last sync (for tests, benchmarks and logs).
type SyncStats struct {
	Full bool
	// Ops is the number of IPVS, address and ipset changes applied.
	Ops int
	// Services is the number of service ports planned.
	Services int
	// GracefulPending is the number of real servers waiting for deletion.
	GracefulPending int
	Duration        time.Duration
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier builds a Proxier. It touches nothing on the node: the first
// Sync (after the initial lists are synced) does. Interfaces IPVS, IPSet,
// Netlink, IPTables and Sysctl are required.
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if ifs.IPVS == nil || ifs.IPSet == nil || ifs.Netlink == nil || ifs.IPTables == nil || ifs.Sysctl == nil {
		return nil, errors.New("ipvs: Interfaces.IPVS, IPSet, Netlink, IPTables and Sysctl are required")
	}
	if ifs.IPTables.Family() != cfg.IPFamily {
		return nil, fmt.Errorf("ipvs: iptables runner is %s but the proxier is %s", ifs.IPTables.Family(), cfg.IPFamily)
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &Proxier{
		cfg:      cfg,
		ifs:      ifs,
		log:      cfg.Logger.WithName("ipvs").WithValues("ipFamily", cfg.IPFamily),
		clock:    clk,
		sets:     newSetNames(cfg.IPFamily),
		plans:    make(map[proxy.ServicePortName]*servicePlan),
		byName:   make(map[types.NamespacedName][]proxy.ServicePortName),
		dp:       newDataplane(),
		owned:    make(map[VirtualServerKey]struct{}),
		graceful: newGracefulQueue(),
		needFull: true,
		setSpecs: make(map[string]Set),
	}
	for _, s := range Sets(cfg.IPFamily) {
		p.setSpecs[s.Name] = s
	}
	p.runner = runner.New("ipvs-"+string(cfg.IPFamily), p.Sync, runner.Config{
		MinInterval: cfg.MinSyncPeriod,
		MaxInterval: cfg.SyncPeriod,
		Clock:       clk,
		Logger:      p.log,
	})
	p.Tracker = changetracker.New(changetracker.Config{
		IPFamily:         cfg.IPFamily,
		NodeName:         cfg.NodeName,
		ServiceProxyName: cfg.ServiceProxyName,
		Filter:           cfg.EndpointFilter,
		Logger:           cfg.Logger,
		OnChange:         p.onChange,
	})
	return p, nil
}

func (p *Proxier) onChange(changetracker.Change) {
	if hs := p.cfg.HealthServer; hs != nil {
		hs.QueuedUpdate(p.cfg.IPFamily)
	}
	p.runner.Trigger()
}

// Run syncs on every change (no more often than MinSyncPeriod), at least
// every SyncPeriod, and while real servers are draining, every few seconds,
// until ctx ends.
func (p *Proxier) Run(ctx context.Context) error {
	go func() {
		t := p.clock.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
				p.mu.Lock()
				pending := p.graceful.Len()
				p.mu.Unlock()
				if pending > 0 {
					p.runner.Trigger()
				}
			}
		}
	}()
	return p.runner.Run(ctx)
}

// LastSync returns what the last sync did.
func (p *Proxier) LastSync() SyncStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Sync programs the node: when it returns nil, the kernel reflects every
// object handed to the handlers before the call. The first sync, the first
// after a failure, after a node label change and once per SyncPeriod are
// full: every plan is recomputed and compared with what the kernel reports,
// so state changed behind our back is repaired and state that is already
// right (after a restart, say) is left untouched. Other syncs change only
// the services that changed. A failure never loses tracker state: the next
// sync is full.
func (p *Proxier) Sync(ctx context.Context) error {
	if !p.Synced() {
		return proxy.ErrNotSynced
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.clock.Now()
	u := p.Update()
	full := p.needFull || u.NodeChanged || start.Sub(p.lastFull) >= p.cfg.SyncPeriod
	p.needFull = true // until this sync succeeds

	var ops opList
	var err error
	if full {
		ops, err = p.syncFull(ctx, u)
	} else {
		ops = p.syncPartial(u)
	}
	if err == nil {
		err = p.apply(ops)
	}
	if err == nil && full {
		err = p.syncIPTables(ctx)
	}
	if _, gerr := p.graceful.process(p.ifs.IPVS, p.clock.Now()); gerr != nil && err == nil {
		err = gerr
	}
	p.clearConntrack(&u)
	p.updateHealth(u)

	d := p.clock.Since(start)
	p.stats = SyncStats{Full: full, Ops: len(ops), Services: len(u.Services), GracefulPending: p.graceful.Len(), Duration: d}
	m := p.cfg.Metrics
	m.ObserveSync(p.cfg.IPFamily, d)
	if full {
		m.ObserveFullSync(p.cfg.IPFamily, d)
	} else {
		m.ObservePartialSync(p.cfg.IPFamily, d)
	}
	if err != nil {
		// the next sync replans everything: this one may have consumed
		// tracker changes it did not get to plan
		p.planned = false
		p.log.Error(err, "Sync failed; the next sync will be full", "ops", len(ops))
		return err
	}
	p.needFull = false
	if full {
		p.lastFull = start
	}
	m.SetLastSync(p.cfg.IPFamily, p.clock.Now())
	if hs := p.cfg.HealthServer; hs != nil {
		hs.Updated(p.cfg.IPFamily)
	}
	p.log.V(2).Info("Synced", "full", full, "ops", len(ops), "services", len(u.Services), "took", d)
	return nil
}

func (p *Proxier) planInput(labels map[string]string) *planInput {
	return &planInput{
		family:        p.cfg.IPFamily,
		nodeName:      p.cfg.NodeName,
		nodeLabels:    labels,
		nodePortAddrs: p.nodePortAddrs,
		scheduler:     p.cfg.Scheduler,
		sets:          p.sets,
		badScheduler: func(spn proxy.ServicePortName, v string) {
			p.log.Info("Unknown scheduler in annotation; using the default", "service", spn.String(), "annotation", AnnotationScheduler, "value", v, "default", p.cfg.Scheduler)
		},
	}
}

// syncPartial replans only the changed services and returns the ops that
// turn the last applied state into the new one.
func (p *Proxier) syncPartial(u changetracker.Update) opList {
	if len(u.ChangedServices) == 0 {
		return nil
	}
	sink := &partialSink{p: p}
	p.replanChanged(u, sink)
	sortOps(sink.ops)
	return sink.ops
}

// replanChanged replans the changed services into p.plans and p.dp,
// reporting what changes to sink (nil: none).
func (p *Proxier) replanChanged(u changetracker.Update, sink diffSink) {
	in := p.planInput(u.NodeLabels)
	// the ports each changed service has now (from the tracker's index:
	// no walk over the service map)
	current := make(map[types.NamespacedName][]proxy.ServicePortName, len(u.ChangedServices))
	for name := range u.ChangedServices {
		for _, spn := range u.ServicePorts[name] {
			if _, ok := u.Services[spn]; ok {
				current[name] = append(current[name], spn)
			}
		}
	}
	for name := range u.ChangedServices {
		for _, spn := range p.byName[name] {
			if _, still := u.Services[spn]; !still {
				p.dp.replace(spn, p.plans[spn], nil, sink)
				delete(p.plans, spn)
			}
		}
		for _, spn := range current[name] {
			np := planService(in, spn, u.Services[spn], u.Endpoints[spn])
			p.dp.replace(spn, p.plans[spn], np, sink)
			p.plans[spn] = np
		}
		if ports := current[name]; len(ports) > 0 {
			p.byName[name] = ports
		} else {
			delete(p.byName, name)
		}
	}
}

// partialSink turns dataplane changes into ops.
type partialSink struct {
	p   *Proxier
	ops opList
}

func (s *partialSink) vsChanged(old, new *plannedVS) {
	switch {
	case old == nil && new != nil:
		s.ops = append(s.ops, op{kind: opAddVS, vs: new.vs})
		for _, rs := range new.rss {
			s.ops = append(s.ops, op{kind: opAddRS, vs: new.vs, rs: RealServer{Address: rs.Addr(), Port: rs.Port(), Weight: 1}})
		}
	case old != nil && new == nil:
		s.ops = append(s.ops, op{kind: opDelVS, vs: old.vs})
	case old != nil && new != nil:
		if !old.vs.Equal(&new.vs) {
			s.ops = append(s.ops, op{kind: opUpdateVS, vs: new.vs})
		}
		s.ops = s.p.diffRealServers(s.ops, new.vs, old.rss, new.rss)
	}
}

func (s *partialSink) addrChanged(a netip.Addr, add bool) {
	if add {
		s.ops = append(s.ops, op{kind: opBind, addr: a})
	} else {
		s.ops = append(s.ops, op{kind: opUnbind, addr: a})
	}
}

func (s *partialSink) entryChanged(e setEntry, add bool) {
	k := opDelEntry
	if add {
		k = opAddEntry
	}
	s.ops = append(s.ops, op{kind: k, set: s.p.setSpec(e.set), entry: e.entry})
}

func (s *partialSink) conflict(spn proxy.ServicePortName, key VirtualServerKey, holder proxy.ServicePortName) {
	s.p.log.Info("Virtual server already used by another service port; skipped", "service", spn.String(), "virtualServer", key.String(), "heldBy", holder.String())
}

// diffRealServers appends the ops that turn real servers old into new (both
// sorted) on vs: new ones are added (or restored to weight 1 if draining),
// removed ones drained (TCP, SCTP) or deleted (UDP).
func (p *Proxier) diffRealServers(ops opList, vs VirtualServer, old, new []netip.AddrPort) opList {
	i, j := 0, 0
	for i < len(old) || j < len(new) {
		switch {
		case j == len(new) || (i < len(old) && old[i].Compare(new[j]) < 0):
			ops = p.removeRealServer(ops, vs, RealServer{Address: old[i].Addr(), Port: old[i].Port(), Weight: 1})
			i++
		case i == len(old) || new[j].Compare(old[i]) < 0:
			ops = p.addRealServer(ops, vs, new[j])
			j++
		default:
			i++
			j++
		}
	}
	return ops
}

func (p *Proxier) addRealServer(ops opList, vs VirtualServer, ap netip.AddrPort) opList {
	rs := RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: 1}
	if p.graceful.has(vs.Key(), ap) {
		return append(ops, op{kind: opUpdateRS, vs: vs, rs: rs})
	}
	return append(ops, op{kind: opAddRS, vs: vs, rs: rs})
}

func (p *Proxier) removeRealServer(ops opList, vs VirtualServer, rs RealServer) opList {
	if vs.Protocol == v1.ProtocolUDP {
		return append(ops, op{kind: opDelRS, vs: vs, rs: rs})
	}
	if rs.Weight == 0 && p.graceful.has(vs.Key(), rs.AddrPort()) {
		return ops
	}
	rs.Weight = 0
	return append(ops, op{kind: opUpdateRS, vs: vs, rs: rs})
}

func (p *Proxier) setSpec(name string) Set {
	if s, ok := p.setSpecs[name]; ok {
		return s
	}
	return Set{Name: name}
}

// updateHealth hands the health-check server the current state.
func (p *Proxier) updateHealth(u changetracker.Update) {
	hc := p.cfg.ServiceHealthServer
	if hc == nil {
		return
	}
	if err := hc.SyncServices(u.Services.HealthCheckNodePorts()); err != nil {
		p.log.Error(err, "Updating health-check services failed")
	}
	if err := hc.SyncEndpoints(u.Endpoints.LocalReadyEndpoints()); err != nil {
		p.log.Error(err, "Updating health-check endpoints failed")
	}
}
