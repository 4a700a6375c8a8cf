package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// gracefulRecheck is how soon a sync comes back while real servers drain,
// to delete those whose connections ended (kube-proxy checks every minute;
// we check more often, and the check is one listing per draining virtual
// server).
const gracefulRecheck = 5 * time.Second

// Proxier is the IPVS engine: a proxy.Provider that programs virtual
// servers, kube-ipvs0 addresses, ipsets and a fixed iptables ruleset. Its
// public surface is the engine base's (engine.Base): the handlers, Sync,
// Run, DryRun, Cleanup, Close, Stats, RequestFullSync, Config, IPFamily.
type Proxier struct {
	*engine.Base

	cfg      Config
	ifs      Interfaces
	log      logr.Logger
	sets     setNames
	setSpecs map[string]*Set
	// rsBuf holds the real server of the op being applied (see rsArg).
	rsBuf RealServer

	// Everything below is touched only from the base's hooks, which never
	// run concurrently.

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
	// planned: plans and dp hold every service and are up to date with
	// the tracker, so a full sync may replan only what changed.
	planned   bool
	setupDone bool
	rulesBuf  bytes.Buffer
	// canary is what the drift check expects of our iptables rules, read
	// back after the last full sync's restore (nil: none yet).
	canary ruleCounts
}

var _ proxy.Provider = (*Proxier)(nil)

// NewProxier builds a Proxier. It touches nothing on the node: the first
// Sync (after the initial lists are synced) does. Interfaces IPVS, IPSet,
// Netlink, IPTables and Sysctl are required; cfg.IPFamily, when set, must
// be the iptables runner's family. The interfaces stay the caller's:
// Close does not close them (ifs.IPVS.Close releases its socket).
func NewProxier(cfg Config, ifs Interfaces) (*Proxier, error) {
	if ifs.IPVS == nil || ifs.IPSet == nil || ifs.Netlink == nil || ifs.IPTables == nil || ifs.Sysctl == nil {
		return nil, errors.New("ipvs: Interfaces.IPVS, IPSet, Netlink, IPTables and Sysctl are required")
	}
	cfg, err := cfg.withDefaults(ifs.IPTables.Family())
	if err != nil {
		return nil, err
	}
	p := &Proxier{
		cfg:      cfg,
		ifs:      ifs,
		log:      cfg.Logger.WithName("ipvs").WithValues("ipFamily", cfg.IPFamily),
		sets:     newSetNames(cfg.IPFamily),
		plans:    make(map[proxy.ServicePortName]*servicePlan),
		byName:   make(map[types.NamespacedName][]proxy.ServicePortName),
		dp:       newDataplane(),
		owned:    make(map[VirtualServerKey]struct{}),
		graceful: newGracefulQueue(),
		setSpecs: make(map[string]*Set),
	}
	for _, s := range Sets(cfg.IPFamily) {
		p.setSpecs[s.Name] = &s
	}
	p.Base, err = engine.New(cfg.Common, engine.Hooks{
		Name:    "ipvs",
		Apply:   p.apply,
		DryRun:  p.dryRun,
		Drifted: p.drifted,
		Cleanup: p.cleanup,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// apply is plan + diff + apply for one update (engine.Hooks.Apply). A full
// sync recomputes every plan and compares it with what the kernel reports,
// so state changed behind our back is repaired and state that is already
// right (after a restart, say) is left untouched; a partial one replans
// only the services that changed. Draining real servers whose connections
// ended are deleted by either.
func (p *Proxier) apply(ctx context.Context, req *engine.Request) (engine.Result, error) {
	var ops opList
	var err error
	if req.Full {
		ops, err = p.planFull(req.Update)
	} else {
		ops = p.planPartial(req.Update)
	}
	// drained real servers are deleted even when planning failed
	res, xerr := p.execute(p.appendReaps(ops))
	if err == nil {
		err = xerr
	}
	if err == nil && req.Full {
		err = p.syncIPTables(ctx)
	}
	if p.graceful.Len() > 0 {
		res.RequeueAfter = gracefulRecheck
	}
	if err != nil {
		// the next sync (full) replans everything: this one consumed
		// tracker changes that may not have reached the kernel
		p.planned = false
		return res, err
	}
	return res, nil
}

func (p *Proxier) planInput(labels map[string]string, nodePortAddrs []netip.Addr) *planInput {
	return &planInput{
		family:        p.cfg.IPFamily,
		nodeName:      p.cfg.NodeName,
		nodeLabels:    labels,
		nodePortAddrs: nodePortAddrs,
		scheduler:     p.cfg.Scheduler,
		sets:          p.sets,
		badScheduler: func(spn proxy.ServicePortName, v string) {
			p.log.Info("Unknown scheduler in annotation; using the default", "service", spn.String(), "annotation", AnnotationScheduler, "value", v, "default", p.cfg.Scheduler)
		},
	}
}

// planPartial replans only the changed services and returns the ops that
// turn the last applied state into the new one.
func (p *Proxier) planPartial(u *changetracker.Update) opList {
	if len(u.ChangedServices) == 0 {
		return nil
	}
	sink := newPartialSink(p)
	p.replanChanged(u, sink)
	sink.finish()
	sortOps(sink.ops)
	return sink.ops
}

// replanChanged replans the changed services into p.plans and p.dp,
// reporting what changes to sink (nil: none).
func (p *Proxier) replanChanged(u *changetracker.Update, sink diffSink) {
	in := p.planInput(u.NodeLabels, p.nodePortAddrs)
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

// partialSink turns the dataplane changes of one partial sync into ops. It
// nets the changes of each virtual server, address and set entry over the
// whole batch first: ops run additions first and removals last, so a
// service removed and another that takes its virtual server, address or
// entry in the same batch (the next service on a node port, a cluster IP
// given again) would otherwise have the removal undo the addition.
type partialSink struct {
	p   *Proxier
	ops opList
	// vss: the programmed virtual server of each key before the batch
	// (old) and after it (new), in the order the keys first changed
	vss      map[VirtualServerKey]*vsDelta
	vssOrder []VirtualServerKey
	// addrs, entries: +1 bound (added), -1 unbound (deleted), 0 unchanged
	addrs   map[netip.Addr]int
	entries map[setEntry]int
}

type vsDelta struct{ old, new *plannedVS }

func newPartialSink(p *Proxier) *partialSink {
	return &partialSink{p: p, vss: make(map[VirtualServerKey]*vsDelta), addrs: make(map[netip.Addr]int), entries: make(map[setEntry]int)}
}

func (s *partialSink) vsChanged(old, new *plannedVS) {
	var key VirtualServerKey
	if old != nil {
		key = old.vs.Key()
	} else if new != nil {
		key = new.vs.Key()
	} else {
		return
	}
	if d := s.vss[key]; d != nil {
		d.new = new
		return
	}
	s.vss[key] = &vsDelta{old: old, new: new}
	s.vssOrder = append(s.vssOrder, key)
}

func (s *partialSink) addrChanged(a netip.Addr, add bool) {
	if add {
		s.addrs[a]++
	} else {
		s.addrs[a]--
	}
}

func (s *partialSink) entryChanged(e setEntry, add bool) {
	if add {
		s.entries[e]++
	} else {
		s.entries[e]--
	}
}

func (s *partialSink) conflict(spn proxy.ServicePortName, key VirtualServerKey, holder proxy.ServicePortName) {
	s.p.log.Info("Virtual server already used by another service port; skipped", "service", spn.String(), "virtualServer", key.String(), "heldBy", holder.String())
}

// finish turns the net changes into ops.
func (s *partialSink) finish() {
	for _, key := range s.vssOrder {
		d := s.vss[key]
		old, new := d.old, d.new
		switch {
		case old == nil && new != nil:
			s.ops = append(s.ops, op{kind: opAddVS, vs: &new.vs})
			for _, rs := range new.rss {
				s.ops = append(s.ops, op{kind: opAddRS, weight: 1, vs: &new.vs, rs: rs})
			}
		case old != nil && new == nil:
			s.ops = append(s.ops, op{kind: opDelVS, vs: &old.vs})
		case old != nil && new != nil:
			if !old.vs.Equal(&new.vs) {
				s.ops = append(s.ops, op{kind: opUpdateVS, vs: &new.vs})
			}
			s.ops = s.p.diffRealServers(s.ops, &new.vs, old.rss, new.rss)
		}
	}
	for a, n := range s.addrs {
		switch {
		case n > 0:
			s.ops = append(s.ops, addrOp(opBind, a))
		case n < 0:
			s.ops = append(s.ops, addrOp(opUnbind, a))
		}
	}
	for e, n := range s.entries {
		if n == 0 {
			continue
		}
		k := opDelEntry
		if n > 0 {
			k = opAddEntry
		}
		en := e.entry
		s.ops = append(s.ops, op{kind: k, set: s.p.setSpec(e.set), entry: &en})
	}
}

// diffRealServers appends the ops that turn real servers old into new (both
// sorted) on vs: new ones are added (or restored to weight 1 if draining),
// removed ones drained (TCP, SCTP) or deleted (UDP).
func (p *Proxier) diffRealServers(ops opList, vs *VirtualServer, old, new []netip.AddrPort) opList {
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

func (p *Proxier) addRealServer(ops opList, vs *VirtualServer, ap netip.AddrPort) opList {
	rs := RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: 1}
	if p.graceful.has(vs.Key(), ap) {
		return append(ops, rsOp(opUpdateRS, vs, rs))
	}
	return append(ops, rsOp(opAddRS, vs, rs))
}

// removeRealServer: UDP real servers go at once; TCP and SCTP ones are
// drained (weight 0, then deleted by a reap op once their connections
// end), unless they are draining already.
func (p *Proxier) removeRealServer(ops opList, vs *VirtualServer, rs RealServer) opList {
	if vs.Protocol == v1.ProtocolUDP {
		return append(ops, rsOp(opDelRS, vs, rs))
	}
	if rs.Weight == 0 && p.graceful.has(vs.Key(), rs.AddrPort()) {
		return ops
	}
	rs.Weight = 0
	return append(ops, rsOp(opUpdateRS, vs, rs))
}

func (p *Proxier) setSpec(name string) *Set {
	if s, ok := p.setSpecs[name]; ok {
		return s
	}
	return &Set{Name: name}
}

// dryRun renders what a full sync would do now (engine.Hooks.DryRun): plan
// every service, read the kernel, diff, and print the ops as ipvsadm / ip
// / ipset commands, then the iptables-restore input. It changes nothing on
// the node and nothing of what the proxier believes the node holds; it only
// marks the incremental plans stale, since the tracker changes this update
// consumed are not in them (the base makes the next sync full).
func (p *Proxier) dryRun(_ context.Context, req *engine.Request) (string, error) {
	p.planned = false
	u := req.Update
	npa, err := p.computeNodePortAddrs()
	if err != nil {
		return "", err
	}
	in := p.planInput(u.NodeLabels, npa)
	want := newDataplane()
	for spn, svc := range u.Services {
		want.replace(spn, nil, planService(in, spn, svc, u.Endpoints[spn]), nil)
	}
	k, err := p.readKernel()
	if err != nil {
		return "", fmt.Errorf("ipvs: read kernel state: %w", err)
	}
	ops := p.appendReaps(p.diffKernel(want, k))
	var b bytes.Buffer
	fmt.Fprintf(&b, "# ipvs %s: %d change(s)\n", p.cfg.IPFamily, len(ops))
	b.WriteString(ops.String())
	b.WriteString("# iptables-restore --noflush\n")
	writeRules(&b, &p.cfg, true)
	return b.String(), nil
}
