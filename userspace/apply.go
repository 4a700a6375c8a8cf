package userspace

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// ServiceError says why one service port is not (fully) served; the rest of
// the node is. Sync returns them joined (inside the base's *SyncError);
// test with errors.As.
type ServiceError struct {
	Service proxy.ServicePortName
	Err     error
}

func (e *ServiceError) Error() string { return fmt.Sprintf("service %s: %v", e.Service, e.Err) }
func (e *ServiceError) Unwrap() error { return e.Err }

// apply is Hooks.Apply: it brings sockets, balancers and capture rules to
// the state planned for req. A partial sync plans only the services the
// update changed (and the ports that failed last time), so its cost
// follows the change, not the number of services; a full one plans every
// service and rewrites our chains.
//
// A sync the base makes full only because the previous one failed is
// treated as partial when that failure was confined to service ports that
// could not get a socket (the rules were written, every other service is
// served): those ports are retried, nothing else is replanned, and the
// rules are rewritten in full only if the drift check finds them changed.
// A port range exhausted for hours then costs a retry per sync, not a
// full rewrite.
//
// It returns the iptables error if the rules could not be written (the
// next sync rewrites them all) and otherwise the joined *ServiceError of
// service ports that could not be served.
func (p *Proxier) apply(ctx context.Context, req *engine.Request) (engine.Result, error) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	u := req.Update
	full, rulesFull := req.Full, req.Full
	if req.Reason == engine.ReasonFailure && p.svc.failedServicesOnly && !u.NodeChanged && (p.rules.valid || p.cfg.Capture != CaptureIPTables) {
		full, rulesFull = false, false
		if p.cfg.Capture == CaptureIPTables {
			if drifted, err := p.drifted(ctx); drifted || err != nil {
				rulesFull = true
			}
		}
	}
	p.svc.failedServicesOnly = false
	writes := 0

	plans := p.planServices(u, full)
	writes += p.teardownVanished(u, full, plans)
	opened, errs := p.applyPlans(plans)
	writes += opened
	p.lb.CleanupStale()
	defer p.setNoLocalMetrics()

	switch {
	case p.cfg.Capture != CaptureIPTables:
		clear(p.rules.dirty) // no rules to write
	case len(p.rules.dirty) > 0 || !p.rules.valid || rulesFull:
		n, err := p.syncRules(ctx, rulesFull)
		if err != nil {
			return engine.Result{}, errors.Join(append([]error{err}, errs...)...)
		}
		writes += n
	}
	if len(errs) > 0 {
		p.svc.failedServicesOnly = true
		return engine.Result{}, errors.Join(errs...)
	}
	res := engine.Result{Writes: writes}
	if p.cfg.Capture == CaptureIPTables {
		res.Conntrack = slices.Clone(p.svc.staleUDP)
	}
	p.svc.staleUDP = p.svc.staleUDP[:0]
	return res, nil
}

// planServices plans every service port (full) or only those of changed
// services and the failing ones. Ports that cannot be served (SCTP) are
// recorded in skipped, logged and counted once.
func (p *Proxier) planServices(u *changetracker.Update, full bool) map[proxy.ServicePortName]*servicePlan {
	pp := planParams{
		capture: p.cfg.Capture, listen: p.cfg.ListenAddress, nodeName: p.cfg.NodeName, nodeLabels: u.NodeLabels,
		clusterCIDRs: p.cfg.ClusterCIDRs,
	}
	t := &p.svc
	plans := map[proxy.ServicePortName]*servicePlan{}
	t.lastPlans = 0
	planOne := func(name proxy.ServicePortName, svc proxy.ServicePort) {
		t.lastPlans++
		plan, err := planService(name, svc, u.Endpoints[name], pp)
		if err != nil {
			if t.skipped[name] == nil {
				p.count(counterSkippedProtocol)
				p.log.Info("Not serving service port", "service", name, "protocol", svc.Protocol(), "reason", err)
			}
			t.skipped[name] = err
			return
		}
		delete(t.skipped, name)
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
				// not planned (and is torn down).
				if svc, ok := u.Services[name]; ok {
					planOne(name, svc)
				}
			}
		}
		// Failing ports are retried whether or not their service changed.
		for name := range t.failing {
			if u.ChangedServices.Has(name.NamespacedName) {
				continue // planned above
			}
			if svc, ok := u.Services[name]; ok {
				planOne(name, svc)
			}
		}
	}
	// Only a changed service can have lost a skipped port.
	for name := range t.skipped {
		if !full && !u.ChangedServices.Has(name.NamespacedName) {
			continue
		}
		if _, ok := u.Services[name]; !ok {
			delete(t.skipped, name)
		}
	}
	return plans
}

// teardownVanished closes the ports that vanished (from the tracker or
// from the filtered view), became skipped or changed protocol. Only a
// changed service can have lost a port; its old ports come from
// byService, since the tracker no longer lists the ones that left. It
// returns the number of sockets closed.
func (p *Proxier) teardownVanished(u *changetracker.Update, full bool, plans map[proxy.ServicePortName]*servicePlan) int {
	t := &p.svc
	teardown := t.teardownBuf[:0]
	if full {
		for name := range t.services {
			teardown = append(teardown, name)
		}
	} else {
		for nn := range u.ChangedServices {
			teardown = append(teardown, t.byService[nn]...)
		}
	}
	closed := 0
	for _, name := range teardown {
		st := t.services[name]
		_, present := u.Services[name]
		if plan, replanned := plans[name]; !present || t.skipped[name] != nil || replanned && plan.protocol != st.plan.protocol {
			t.staleUDP = conntrackFilters(st.plan, t.staleUDP)
			closed += len(st.listeners)
			p.teardownService(st)
			p.removeService(name)
			delete(t.failing, name)
			p.rules.dirty[name] = true
		}
	}
	clear(teardown)
	t.teardownBuf = teardown[:0]
	return closed
}

// applyPlans applies each new plan: balancers, then sockets. It returns
// the number of sockets opened or closed and the errors of service ports
// that are not fully served.
func (p *Proxier) applyPlans(plans map[proxy.ServicePortName]*servicePlan) (int, []error) {
	t := &p.svc
	var errs []error
	changed := 0
	for name, plan := range plans {
		st := t.services[name]
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
			p.rules.dirty[name] = true
		}
		if st.plan == nil || !slices.Equal(st.plan.rules, plan.rules) {
			t.staleUDP = conntrackFilters(st.plan, t.staleUDP)
			t.staleUDP = conntrackFilters(plan, t.staleUDP)
		}
		p.applyFrontends(st.plan, plan)
		var n int
		n, st.err = p.applyListeners(st, plan)
		changed += n
		p.setPlan(st, plan)
		if st.err == nil {
			delete(t.failing, name)
			continue
		}
		t.failing[name] = true
		p.count(counterServiceErrors)
		p.log.Error(st.err, "Service port not fully served", "service", name)
		errs = append(errs, &ServiceError{Service: name, Err: st.err})
	}
	return changed, errs
}

func (p *Proxier) setNoLocalMetrics() {
	if m := p.cfg.Metrics; m != nil {
		m.SetNoLocalEndpoints(p.cfg.IPFamily, metrics.TrafficPolicyInternal, p.svc.noLocalInternal)
		m.SetNoLocalEndpoints(p.cfg.IPFamily, metrics.TrafficPolicyExternal, p.svc.noLocalExternal)
	}
}

// addService records st as name's state; name must have none.
func (p *Proxier) addService(name proxy.ServicePortName, st *serviceState) {
	t := &p.svc
	t.services[name] = st
	t.byService[name.NamespacedName] = append(t.byService[name.NamespacedName], name)
	if st.plan != nil {
		t.countNoLocal(st.plan, 1)
	}
}

// removeService forgets name's state (its sockets must be closed already).
func (p *Proxier) removeService(name proxy.ServicePortName) {
	t := &p.svc
	st := t.services[name]
	if st == nil {
		return
	}
	if st.plan != nil {
		t.countNoLocal(st.plan, -1)
	}
	delete(t.services, name)
	nn := name.NamespacedName
	ports := slices.DeleteFunc(t.byService[nn], func(n proxy.ServicePortName) bool { return n == name })
	if len(ports) == 0 {
		delete(t.byService, nn)
	} else {
		t.byService[nn] = ports
	}
}

// setPlan makes plan st's current plan.
func (p *Proxier) setPlan(st *serviceState, plan *servicePlan) {
	if st.plan != nil {
		p.svc.countNoLocal(st.plan, -1)
	}
	st.plan = plan
	p.svc.countNoLocal(plan, 1)
}

func (t *serviceTable) countNoLocal(plan *servicePlan, delta int) {
	if plan.noLocalInternal {
		t.noLocalInternal += delta
	}
	if plan.noLocalExternal {
		t.noLocalExternal += delta
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
