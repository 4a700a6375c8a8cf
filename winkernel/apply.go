package winkernel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// syncRun is one Apply: what it planned and what it wrote.
type syncRun struct {
	p      *Proxier
	full   bool
	writes int
	errs   []error
	// listed are every LB HNS listed by key (full syncs only), ours or not.
	listed map[LBKey]LoadBalancer
	// relisted: endpoints were listed during this sync already.
	relisted bool
	// unused collects remote endpoints whose last user went away.
	unused map[netip.Addr]bool
}

func (r *syncRun) fail(err error) { r.errs = append(r.errs, err) }

// apply is Hooks.Apply: plan the services in scope (all on a full sync,
// the changed ones otherwise), diff against what HNS holds and write the
// difference. A full sync first lists the network, its endpoints and every
// load balancer, so what was deleted or changed behind our back is
// recreated. Errors of one service do not stop the others; they are
// joined and returned (the base makes the next sync full).
func (p *Proxier) apply(_ context.Context, req *engine.Request) (engine.Result, error) {
	u := req.Update
	r := &syncRun{p: p, full: req.Full || !p.st.synced, unused: map[netip.Addr]bool{}}
	if r.full {
		if err := r.refresh(); err != nil {
			return engine.Result{}, err
		}
	}
	if err := r.ensureSourceVIP(); err != nil {
		return engine.Result{Writes: r.writes}, err
	}

	// Scope: every service port on a full sync (and every one we hold),
	// else the ports of changed services, present and past.
	scopeSet := map[proxy.ServicePortName]bool{}
	if r.full {
		for name := range u.Services {
			scopeSet[name] = true
		}
		for name := range p.st.svcKeys {
			scopeSet[name] = true
		}
	} else {
		for ns := range u.ChangedServices {
			for _, name := range u.ServicePorts[ns] {
				scopeSet[name] = true
			}
			for name := range p.st.svcPorts[ns] {
				scopeSet[name] = true
			}
		}
	}
	scope := make([]proxy.ServicePortName, 0, len(scopeSet))
	for name := range scopeSet {
		scope = append(scope, name)
	}
	slices.SortFunc(scope, compareServicePortNames)

	plans := r.plan(u.Services, u.Endpoints, u.NodeLabels, scope)
	want, owner := r.claim(scope, scopeSet, plans)

	// 1. Delete what is no longer wanted, before anything takes its place.
	if r.full {
		keys := make([]LBKey, 0, len(p.st.lbs))
		for key := range p.st.lbs {
			if want[key] == nil {
				keys = append(keys, key)
			}
		}
		sortKeys(keys)
		for _, key := range keys {
			r.deleteLB(key)
		}
	} else {
		for _, name := range scope {
			for _, key := range p.st.svcKeys[name] {
				if a := p.st.lbs[key]; a != nil && a.owner == name && want[key] == nil {
					r.deleteLB(key)
				}
			}
		}
	}

	// 2. Remote endpoints, reference-counted across service ports.
	for _, name := range scope {
		for _, ip := range p.st.svcRemotes[name] {
			if p.st.remoteRefs[ip]--; p.st.remoteRefs[ip] <= 0 {
				delete(p.st.remoteRefs, ip)
				r.unused[ip] = true
			}
		}
		delete(p.st.svcRemotes, name)
		plan, ok := plans[name]
		if !ok {
			continue
		}
		var held []netip.Addr
		for _, rem := range plan.Remotes {
			if r.ensureRemote(rem) {
				held = append(held, rem.IP)
				p.st.remoteRefs[rem.IP]++
				delete(r.unused, rem.IP)
			}
		}
		if len(held) > 0 {
			p.st.svcRemotes[name] = held
		}
	}

	// 3. Create or update every wanted LB.
	keys := make([]LBKey, 0, len(want))
	for key := range want {
		keys = append(keys, key)
	}
	sortKeys(keys)
	held := map[proxy.ServicePortName][]LBKey{}
	for _, key := range keys {
		if r.ensureLB(want[key], owner[key]) {
			held[owner[key]] = append(held[owner[key]], key)
		}
	}
	for _, name := range scope {
		delete(p.st.svcKeys, name)
		if len(held[name]) > 0 {
			p.st.svcKeys[name] = held[name]
		}
		ns := name.NamespacedName
		if _, ok := u.Services[name]; ok {
			if p.st.svcPorts[ns] == nil {
				p.st.svcPorts[ns] = map[proxy.ServicePortName]bool{}
			}
			p.st.svcPorts[ns][name] = true
		} else if ports := p.st.svcPorts[ns]; ports != nil {
			delete(ports, name)
			if len(ports) == 0 {
				delete(p.st.svcPorts, ns)
			}
		}
	}

	// 4. Delete remote endpoints no service port uses any more.
	r.sweepRemotes()

	p.st.synced = p.st.synced || len(r.errs) == 0
	return engine.Result{Writes: r.writes}, joinErrs(r.errs)
}

func compareServicePortNames(a, b proxy.ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}

func sortKeys(keys []LBKey) {
	sort.Slice(keys, func(i, j int) bool {
		if c := keys[i].VIP.Compare(keys[j].VIP); c != 0 {
			return c < 0
		}
		if keys[i].Port != keys[j].Port {
			return keys[i].Port < keys[j].Port
		}
		return keys[i].Protocol < keys[j].Protocol
	})
}

// refresh lists the network, its endpoints and every load balancer, and
// rebuilds the engine's view from them (full syncs).
func (r *syncRun) refresh() error {
	p := r.p
	n, err := p.hns.GetNetworkByName(p.cfg.NetworkName)
	if err != nil {
		return fmt.Errorf("HNS network %q: %w", p.cfg.NetworkName, err)
	}
	eps, err := p.hns.ListEndpoints(n.ID)
	if err != nil {
		return fmt.Errorf("listing HNS endpoints: %w", err)
	}
	lbs, err := p.hns.ListLoadBalancers()
	if err != nil {
		return fmt.Errorf("listing HNS load balancers: %w", err)
	}
	old := p.st.lbs
	referenced := p.st.referenced
	p.st.reset()
	p.st.network = n
	p.st.referenced = referenced
	byID := r.setEndpoints(eps)
	r.relisted = true
	r.listed = make(map[LBKey]LoadBalancer, len(lbs))
	for _, lb := range lbs {
		key := lb.Key()
		r.listed[key] = lb
		mine := false
		if a := old[key]; a != nil && a.lb.ID == lb.ID {
			mine = true
		} else {
			mine = p.ownsLB(&lb, byID)
		}
		if mine {
			if prev := p.st.lbs[key]; prev != nil {
				// Two of ours with one key cannot both exist in HNS; keep one.
				continue
			}
			p.st.lbs[key] = &appliedLB{lb: lb}
		}
	}
	if len(old) > 0 {
		missing := 0
		for key, a := range old {
			if l, ok := r.listed[key]; !ok || l.ID != a.lb.ID {
				missing++
			}
		}
		if missing > 0 {
			p.log.Info("Load balancers changed behind our back; recreating them", "missing", missing)
		}
	}
	return nil
}

// setEndpoints replaces the endpoint cache; on duplicate addresses (a
// Windows Server 2019 bug) a local endpoint wins over a remote one.
func (r *syncRun) setEndpoints(eps []Endpoint) map[string]struct{} {
	st := &r.p.st
	st.endpoints = make(map[netip.Addr]*Endpoint, len(eps))
	byID := make(map[string]struct{}, len(eps))
	st.rootIP = netip.Addr{}
	for i := range eps {
		ep := &eps[i]
		byID[ep.ID] = struct{}{}
		if !ep.Remote && ep.Name == r.p.cfg.RootHNSEndpointName {
			st.rootIP = ep.IP
		}
		if !ep.IP.IsValid() {
			continue
		}
		if prev, ok := st.endpoints[ep.IP]; ok && !prev.Remote {
			continue
		}
		st.endpoints[ep.IP] = ep
	}
	return byID
}

// relistEndpoints lists the endpoints again (once per sync), for a local
// endpoint the CNI created since the last listing.
func (r *syncRun) relistEndpoints() {
	if r.relisted || r.p.st.network == nil {
		return
	}
	r.relisted = true
	eps, err := r.p.hns.ListEndpoints(r.p.st.network.ID)
	if err != nil {
		r.fail(fmt.Errorf("listing HNS endpoints: %w", err))
		return
	}
	r.setEndpoints(eps)
}

// ensureSourceVIP creates the overlay source-VIP endpoint when missing.
func (r *syncRun) ensureSourceVIP() error {
	p := r.p
	n := p.st.network
	if n == nil || !n.Type.IsOverlay() {
		return nil
	}
	vip := p.cfg.SourceVIP
	if !vip.IsValid() {
		return errors.New("winkernel: SourceVIP is required on an overlay network")
	}
	if _, ok := p.st.endpoints[vip]; ok {
		return nil
	}
	r.writes++
	ep, err := p.hns.CreateEndpoint(n.ID, Endpoint{Name: "svcproxy-source-vip", IP: vip, MAC: p.cfg.HostMAC, ProviderAddress: p.cfg.NodeIP()})
	if err != nil {
		return fmt.Errorf("creating the source VIP endpoint %s: %w", vip, err)
	}
	p.st.endpoints[vip] = &ep
	return nil
}

// plan plans every service port in scope that still exists (local
// endpoints missing from the cache are looked for again by target); on an overlay
// network it lists the network again (once) when a remote backend is in
// no known remote subnet, as the CNI may have added the subnet since.
func (r *syncRun) plan(services map[proxy.ServicePortName]proxy.ServicePort, endpoints map[proxy.ServicePortName][]proxy.Endpoint,
	nodeLabels map[string]string, scope []proxy.ServicePortName) map[proxy.ServicePortName]servicePlan {
	p := r.p
	plans := make(map[proxy.ServicePortName]servicePlan, len(scope))
	planAll := func() (unknownSubnet bool) {
		env := p.env(nodeLabels)
		for _, name := range scope {
			svc, ok := services[name]
			if !ok {
				continue
			}
			plan := planServicePort(env, svc, endpoints[name])
			for _, s := range plan.Skipped {
				p.log.V(2).Info("Skipping an endpoint", "servicePort", name.String(), "reason", s)
			}
			plans[name] = plan
			if env.overlay {
				for _, rem := range plan.Remotes {
					if rem.IP == svc.ClusterIP() {
						continue
					}
					if _, ok := env.network.ProviderAddressFor(rem.IP); !ok {
						unknownSubnet = true
					}
				}
			}
		}
		return unknownSubnet
	}
	if unknownSubnet := planAll(); !r.full && unknownSubnet && p.st.network != nil {
		if n, err := p.hns.GetNetworkByName(p.cfg.NetworkName); err == nil {
			p.st.network = n
			planAll()
		}
	}
	return plans
}

// claim decides which service port gets each LB key: one LB per key in
// HNS, so a second service port wanting a key already held (say, two
// services with the same external IP and port) is refused and logged.
func (r *syncRun) claim(scope []proxy.ServicePortName, inScope map[proxy.ServicePortName]bool,
	plans map[proxy.ServicePortName]servicePlan) (map[LBKey]*wantLB, map[LBKey]proxy.ServicePortName) {
	p := r.p
	want := map[LBKey]*wantLB{}
	owner := map[LBKey]proxy.ServicePortName{}
	for _, name := range scope {
		plan := plans[name]
		for i := range plan.LBs {
			lb := &plan.LBs[i]
			if o, ok := owner[lb.Key]; ok {
				p.log.Info("Two service ports want one HNS load balancer; keeping the first", "key", lb.Key.String(), "kept", o.String(), "refused", name.String())
				continue
			}
			if a := p.st.lbs[lb.Key]; a != nil && a.owned && a.owner != name && !inScope[a.owner] {
				p.log.Info("HNS load balancer held by another service port", "key", lb.Key.String(), "holder", a.owner.String(), "refused", name.String())
				continue
			}
			want[lb.Key] = lb
			owner[lb.Key] = name
		}
	}
	return want, owner
}

// ensureRemote makes sure an endpoint with rem's address exists (any
// endpoint with that address serves: a local one, or a remote one made by
// an earlier run), creating a remote one when none does.
func (r *syncRun) ensureRemote(rem wantRemote) bool {
	p := r.p
	if ep, ok := p.st.endpoints[rem.IP]; ok {
		if ep.Remote {
			p.st.referenced[rem.IP] = true
		}
		return true
	}
	if p.st.network == nil {
		return false
	}
	r.writes++
	ep, err := p.hns.CreateEndpoint(p.st.network.ID, Endpoint{
		Name: RemoteEndpointNamePrefix + rem.IP.String(), IP: rem.IP, MAC: rem.MAC,
		ProviderAddress: rem.ProviderAddress, Remote: true,
	})
	if err != nil {
		r.fail(fmt.Errorf("creating remote endpoint %s: %w", rem.IP, err))
		return false
	}
	p.st.endpoints[rem.IP] = &ep
	p.st.referenced[rem.IP] = true
	return true
}

// target resolves a planned LB's backends to endpoint IDs; backends with
// no endpoint (a local pod the CNI has not created yet, a remote endpoint
// that failed) are left out.
func (r *syncRun) target(w *wantLB) LoadBalancer {
	lb := LoadBalancer{
		SourceVIP: w.SourceVIP, Protocol: w.Key.Protocol, InternalPort: w.InternalPort, ExternalPort: w.Key.Port,
		Flags: w.Flags, Distribution: w.Distribution,
	}
	if w.Key.VIP.IsValid() {
		lb.FrontendVIPs = []netip.Addr{w.Key.VIP}
	}
	for _, b := range w.Backends {
		ep, ok := r.p.st.endpoints[b.IP]
		if !ok && b.Local && !r.relisted {
			// A pod the CNI created since the last listing.
			r.relistEndpoints()
			ep, ok = r.p.st.endpoints[b.IP]
		}
		if ok {
			lb.EndpointIDs = append(lb.EndpointIDs, ep.ID)
		}
	}
	slices.Sort(lb.EndpointIDs)
	return lb
}

// sameLB compares what matters of two LBs (not the ID; endpoints as sets).
func sameLB(a, b *LoadBalancer) bool {
	if a.SourceVIP != b.SourceVIP || a.Protocol != b.Protocol || a.InternalPort != b.InternalPort ||
		a.ExternalPort != b.ExternalPort || a.Flags != b.Flags || a.Distribution != b.Distribution ||
		!slices.Equal(a.FrontendVIPs, b.FrontendVIPs) || len(a.EndpointIDs) != len(b.EndpointIDs) {
		return false
	}
	if slices.Equal(a.EndpointIDs, b.EndpointIDs) {
		return true
	}
	x, y := slices.Clone(a.EndpointIDs), slices.Clone(b.EndpointIDs)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// ensureLB makes HNS hold w for owner: nothing when it does, an update in
// place where HNS supports it (the ModifyLoadBalancer feature, and no
// "not implemented" answer yet), else delete and create. It reports whether
// the LB is held after the call.
func (r *syncRun) ensureLB(w *wantLB, owner proxy.ServicePortName) bool {
	p := r.p
	target := r.target(w)
	if len(target.EndpointIDs) == 0 {
		if p.st.lbs[w.Key] != nil {
			r.deleteLB(w.Key)
		}
		return false
	}
	a := p.st.lbs[w.Key]
	if a == nil && r.listed != nil {
		// A load balancer for our service's own address and port that we
		// did not attribute: it holds the port, so take it over.
		if l, ok := r.listed[w.Key]; ok {
			a = &appliedLB{lb: l}
			p.st.lbs[w.Key] = a
			p.log.Info("Adopting an HNS load balancer for a service address", "key", w.Key.String(), "id", l.ID)
		}
	}
	if a != nil {
		if sameLB(&a.lb, &target) {
			a.owner, a.owned = owner, true
			return true
		}
		if !p.st.updateOff && p.st.network.Features.ModifyLoadBalancer {
			r.writes++
			updated, err := p.hns.UpdateLoadBalancer(a.lb.ID, target)
			switch {
			case err == nil:
				if updated.ID == "" {
					updated.ID = a.lb.ID
				}
				a.lb, a.owner, a.owned = updated, owner, true
				return true
			case errors.Is(err, ErrNotImplemented):
				p.st.updateOff = true
				p.log.Info("HNS cannot modify load balancers; deleting and recreating them from now on")
			default:
				r.fail(fmt.Errorf("updating load balancer %s for %s: %w", w.Key, owner, err))
				return true // still held, as it was
			}
		}
		if !r.deleteLB(w.Key) {
			return true
		}
	}
	r.writes++
	created, err := p.hns.CreateLoadBalancer(target)
	if err != nil {
		r.fail(fmt.Errorf("creating load balancer %s for %s: %w", w.Key, owner, err))
		return false
	}
	p.st.lbs[w.Key] = &appliedLB{lb: created, owner: owner, owned: true}
	return true
}

// deleteLB deletes our LB with that key. On failure the LB stays in the
// engine's view (it is still in HNS as far as we know) and the sync fails,
// so the next, full, sync lists HNS and retries; a "not found" counts as
// deleted. It reports whether the LB is gone.
func (r *syncRun) deleteLB(key LBKey) bool {
	p := r.p
	a := p.st.lbs[key]
	if a == nil {
		return true
	}
	r.writes++
	if err := p.hns.DeleteLoadBalancer(a.lb.ID); err != nil && !errors.Is(err, ErrNotFound) {
		r.fail(fmt.Errorf("deleting load balancer %s (%s): %w", key, a.lb.ID, err))
		return false
	}
	delete(p.st.lbs, key)
	return true
}

// sweepRemotes deletes remote endpoints no service port uses: those whose
// last user went away in this sync and, on a full sync, every unused
// remote endpoint that is ours (created by this engine, named with
// RemoteEndpointNamePrefix, or used by this process). Local endpoints are
// never deleted.
func (r *syncRun) sweepRemotes() {
	p := r.p
	if r.full {
		for ip, ep := range p.st.endpoints {
			if ep.Remote && p.st.remoteRefs[ip] == 0 && (p.st.referenced[ip] || hasPrefix(ep.Name, RemoteEndpointNamePrefix)) {
				r.unused[ip] = true
			}
		}
	}
	ips := make([]netip.Addr, 0, len(r.unused))
	for ip := range r.unused {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	for _, ip := range ips {
		ep, ok := p.st.endpoints[ip]
		if !ok || !ep.Remote || p.st.remoteRefs[ip] > 0 {
			continue
		}
		r.writes++
		if err := p.hns.DeleteEndpoint(ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			r.fail(fmt.Errorf("deleting remote endpoint %s: %w", ip, err))
			continue
		}
		delete(p.st.endpoints, ip)
		delete(p.st.referenced, ip)
	}
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }
