package winkernel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// syncRun is one Apply: what it planned and what it wrote.
type syncRun struct {
	p      *Proxier
	full   bool
	writes int
	errs   []error
	// listed are every LB HNS listed (full syncs only), ours or not, in
	// HNS's order.
	listed []LoadBalancer
	// listedRemotes are the remote endpoints of the last listing that the
	// endpoint cache holds (full syncs only): the sweep's candidates.
	listedRemotes []*Endpoint
	// owners are the ownership rule's inputs, built on first use (see
	// ownsLB).
	owners *ownership
	// endpointList is the last listing of our network's endpoints.
	endpointList []Endpoint
	// relisted: endpoints were listed during this sync already.
	relisted bool
	// unused collects remote endpoints whose last user went away (partial
	// syncs; a full sync sweeps every unused one of ours).
	unused map[netip.Addr]bool
}

func (r *syncRun) fail(err error) { r.errs = append(r.errs, err) }

// scoped is one service port a sync looks at.
type scoped struct {
	name proxy.ServicePortName
	// present: the service port exists (else its LBs and remote
	// endpoints are released).
	present bool
	plan    servicePlan
	// claimed are the plan's LBs this port got (see claim).
	claimed []*wantLB
}

// apply is Hooks.Apply: plan the services in scope (all on a full sync,
// the changed ones otherwise), diff against what HNS holds and write the
// difference. A full sync first lists the network, its endpoints and every
// load balancer, so what was deleted or changed behind our back is
// recreated. Errors of one service do not stop the others; they are
// joined and returned (the base makes the next sync full).
//
// The cost of a full sync is a few map operations per service port and
// per backend: the per-port state is one map keyed by service, remote
// endpoint references are recounted into a fresh map, and the ownership
// rule's index of endpoint IDs is only built when an LB needs it.
func (p *Proxier) apply(_ context.Context, req *engine.Request) (engine.Result, error) {
	u := req.Update
	r := &syncRun{p: p, full: req.Full || !p.st.synced}
	p.st.remotesHeld = -1
	if r.full {
		if err := r.refresh(); err != nil {
			return engine.Result{}, err
		}
	} else {
		r.unused = map[netip.Addr]bool{}
	}
	if err := r.ensureSourceVIP(); err != nil {
		return engine.Result{Writes: r.writes}, err
	}

	items := r.scope(u)
	r.plan(u.Services, u.Endpoints, u.NodeLabels, items)
	want := r.claim(items)
	if r.full {
		r.attribute(want)
	}

	// 1. Delete what is no longer wanted, before anything takes its place.
	if r.full {
		keys := make([]LBKey, 0, len(p.st.lbs))
		for key := range p.st.lbs {
			if _, ok := want[key]; !ok {
				keys = append(keys, key)
			}
		}
		sortKeys(keys)
		for _, key := range keys {
			r.deleteLB(key)
		}
	} else {
		for i := range items {
			it := &items[i]
			for _, key := range p.st.portState(it.name).keys {
				if a := p.st.lbs[key]; a != nil && a.owner == it.name {
					if _, ok := want[key]; !ok {
						r.deleteLB(key)
					}
				}
			}
		}
	}

	// 2. Remote endpoints, reference-counted across service ports: a full
	// sync counts them again from scratch.
	held := make([]portState, len(items))
	// One backing array for every port's remotes and one for its keys.
	nRemotes, nKeys := 0, 0
	for i := range items {
		nRemotes += len(items[i].plan.Remotes)
		nKeys += len(items[i].claimed)
	}
	remotesBuf, keysBuf := make([]netip.Addr, 0, nRemotes), make([]LBKey, 0, nKeys)
	if r.full {
		p.st.remoteRefs = make(map[netip.Addr]int, len(p.st.remoteRefs))
	} else {
		for i := range items {
			for _, ip := range p.st.portState(items[i].name).remotes {
				if p.st.remoteRefs[ip]--; p.st.remoteRefs[ip] <= 0 {
					delete(p.st.remoteRefs, ip)
					r.unused[ip] = true
				}
			}
		}
	}
	for i := range items {
		it := &items[i]
		held[i].name = it.name
		if !it.present {
			continue
		}
		first := len(remotesBuf)
		for _, rem := range it.plan.Remotes {
			if r.ensureRemote(rem) {
				remotesBuf = append(remotesBuf, rem.IP)
				p.st.remoteRefs[rem.IP]++
				if !r.full {
					delete(r.unused, rem.IP)
				}
			}
		}
		if len(remotesBuf) > first {
			held[i].remotes = remotesBuf[first:len(remotesBuf):len(remotesBuf)]
		}
	}

	// 3. Create or update every wanted LB (in service-port order).
	for i := range items {
		first := len(keysBuf)
		for _, w := range items[i].claimed {
			if r.ensureLB(w, items[i].name) {
				keysBuf = append(keysBuf, w.Key)
			}
		}
		if len(keysBuf) > first {
			held[i].keys = keysBuf[first:len(keysBuf):len(keysBuf)]
		}
	}
	p.st.setPorts(r.full, items, held)

	// 4. Delete remote endpoints no service port uses any more.
	r.sweepRemotes()

	p.st.synced = p.st.synced || len(r.errs) == 0
	return engine.Result{Writes: r.writes}, joinErrs(r.errs)
}

// scope lists the service ports a sync looks at, sorted: every one on a
// full sync (the LBs of past ones are deleted as not wanted, and remote
// endpoint references are counted again), else the ports of changed
// services, present and past.
func (r *syncRun) scope(u *changetracker.Update) []scoped {
	st := &r.p.st
	if r.full {
		names := make([]proxy.ServicePortName, 0, len(u.Services))
		for name := range u.Services {
			names = append(names, name)
		}
		slices.SortFunc(names, compareServicePortNames)
		items := make([]scoped, len(names))
		for i, name := range names {
			items[i] = scoped{name: name, present: true}
		}
		return items
	}
	var names []proxy.ServicePortName
	for ns := range u.ChangedServices {
		first := len(names)
		names = append(names, u.ServicePorts[ns]...)
		for _, ps := range st.services[ns] {
			if !slices.Contains(names[first:], ps.name) {
				names = append(names, ps.name)
			}
		}
	}
	slices.SortFunc(names, compareServicePortNames)
	items := make([]scoped, len(names))
	for i, name := range names {
		_, ok := u.Services[name]
		items[i] = scoped{name: name, present: ok}
	}
	return items
}

func compareServicePortNames(a, b proxy.ServicePortName) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
}

func compareKeys(a, b LBKey) int {
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	return cmp.Or(a.VIP.Compare(b.VIP), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(b2i(a.IPv6), b2i(b.IPv6)))
}

func sortKeys(keys []LBKey) { slices.SortFunc(keys, compareKeys) }

// refresh lists the network, its endpoints and every load balancer, and
// rebuilds the engine's view from them (full syncs). LBs this process
// held keep their owner; the others are attributed after planning (see
// attribute).
func (r *syncRun) refresh() error {
	p := r.p
	hs, err := ListState(p.hns, p.cfg.NetworkName)
	if err != nil {
		return err
	}
	lbs := hs.LoadBalancers
	old := p.st.lbs
	p.st.refreshed(hs.Network)
	r.setEndpoints(hs.Endpoints)
	r.relisted = true
	r.listed = lbs
	found := 0
	for i := range lbs {
		lb := &lbs[i]
		key := lb.Key()
		if a := old[key]; a != nil && a.lb.ID == lb.ID && p.st.lbs[key] == nil {
			p.st.lbs[key] = &appliedLB{lb: *lb}
			found++
		}
	}
	if missing := len(old) - found; missing > 0 {
		p.log.Info("Load balancers changed behind our back; recreating them", "missing", missing)
	}
	return nil
}

// attribute takes, after planning, the listed LBs this process did not
// hold: an LB with the key of a wanted one holds its port, so it is
// adopted (updated in place or replaced); another is ours, and deleted,
// only by the ownership rule (ownsLB). The first listed wins a key.
func (r *syncRun) attribute(want map[LBKey]*wantLB) {
	p := r.p
	adopted := 0
	for i := range r.listed {
		lb := &r.listed[i]
		key := lb.Key()
		if p.st.lbs[key] != nil {
			continue
		}
		if _, ok := want[key]; ok {
			adopted++
		} else if !p.ownsLB(lb, r.ownership()) {
			continue
		}
		p.st.lbs[key] = &appliedLB{lb: *lb}
	}
	if adopted > 0 {
		p.log.V(1).Info("Adopted HNS load balancers holding our services' addresses", "count", adopted)
	}
}

// ownership returns the ownership rule's inputs from the last listing
// (built once per sync, on first use).
func (r *syncRun) ownership() *ownership {
	if r.owners == nil {
		r.owners = r.p.ownership(r.p.st.network, r.endpointList)
	}
	return r.owners
}

// endpointRef is what the endpoint cache keeps of an endpoint: small and
// inline in the map, so that resolving 100,000 backends touches the map
// only.
type endpointRef struct {
	ID     string
	Remote bool
	// Named: a remote endpoint named as ours (RemoteEndpointNamePrefix).
	Named bool
}

func refOf(ep *Endpoint) endpointRef {
	return endpointRef{ID: ep.ID, Remote: ep.Remote, Named: ep.Remote && hasPrefix(ep.Name, RemoteEndpointNamePrefix)}
}

// setEndpoints replaces the endpoint cache; on duplicate addresses (a
// Windows Server 2019 bug) a local endpoint wins over a remote one.
func (r *syncRun) setEndpoints(eps []Endpoint) {
	st := &r.p.st
	st.endpoints = make(map[netip.Addr]endpointRef, len(eps))
	st.rootIP = netip.Addr{}
	r.endpointList, r.owners = eps, nil
	r.listedRemotes = r.listedRemotes[:0]
	for i := range eps {
		ep := &eps[i]
		if !ep.Remote && ep.Name == r.p.cfg.RootHNSEndpointName {
			st.rootIP = ep.IP
		}
		if !ep.IP.IsValid() {
			continue
		}
		if prev, ok := st.endpoints[ep.IP]; ok && !prev.Remote {
			continue
		}
		st.endpoints[ep.IP] = refOf(ep)
		if ep.Remote {
			r.listedRemotes = append(r.listedRemotes, ep)
		}
	}
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
	p.st.endpoints[vip] = refOf(&ep)
	return nil
}

// plan plans every service port in scope that still exists (local
// endpoints missing from the cache are looked for again by target); on an overlay
// network it lists the network again (once) when a remote backend is in
// no known remote subnet, as the CNI may have added the subnet since.
func (r *syncRun) plan(services map[proxy.ServicePortName]proxy.ServicePort, endpoints map[proxy.ServicePortName][]proxy.Endpoint,
	nodeLabels map[string]string, items []scoped) {
	p := r.p
	planAll := func() (unknownSubnet bool) {
		env := p.env(nodeLabels)
		for i := range items {
			it := &items[i]
			if !it.present {
				continue
			}
			svc := services[it.name]
			it.plan = planServicePort(env, svc, endpoints[it.name])
			for _, s := range it.plan.Skipped {
				p.log.V(2).Info("Skipping an endpoint", "servicePort", it.name.String(), "reason", s)
			}
			if env.overlay && !unknownSubnet {
				for _, rem := range it.plan.Remotes {
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
}

// claim decides which service port gets each LB key: one LB per key in
// HNS, so a second service port wanting a key already held (say, two
// services with the same external IP and port) is refused and logged. It
// returns the wanted LBs by key and fills each item's claimed list.
func (r *syncRun) claim(items []scoped) map[LBKey]*wantLB {
	p := r.p
	n := 0
	for i := range items {
		n += len(items[i].plan.LBs)
	}
	want := make(map[LBKey]*wantLB, n)
	owner := func(key LBKey) proxy.ServicePortName {
		for i := range items {
			for _, w := range items[i].claimed {
				if w.Key == key {
					return items[i].name
				}
			}
		}
		return proxy.ServicePortName{}
	}
	var inScope map[proxy.ServicePortName]bool // partial syncs, on first use
	for i := range items {
		it := &items[i]
		for j := range it.plan.LBs {
			lb := &it.plan.LBs[j]
			if _, ok := want[lb.Key]; ok {
				p.log.Info("Two service ports want one HNS load balancer; keeping the first", "key", lb.Key.String(), "kept", owner(lb.Key).String(), "refused", it.name.String())
				continue
			}
			// After a full sync's listing no LB has an owner yet.
			if a := p.st.lbs[lb.Key]; a != nil && a.owned && a.owner != it.name {
				if inScope == nil {
					inScope = make(map[proxy.ServicePortName]bool, len(items))
					for k := range items {
						inScope[items[k].name] = true
					}
				}
				if !inScope[a.owner] {
					p.log.Info("HNS load balancer held by another service port", "key", lb.Key.String(), "holder", a.owner.String(), "refused", it.name.String())
					continue
				}
			}
			want[lb.Key] = lb
			it.claimed = append(it.claimed, lb)
		}
	}
	return want
}

// ensureRemote makes sure an endpoint with rem's address exists (any
// endpoint with that address serves: a local one, or a remote one made by
// an earlier run), creating a remote one when none does.
func (r *syncRun) ensureRemote(rem wantRemote) bool {
	p := r.p
	if ep, ok := p.st.endpoints[rem.IP]; ok {
		if ep.Remote && !ep.Named {
			// Not named as ours: ours to delete because we used it.
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
	p.st.endpoints[rem.IP] = refOf(&ep)
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
	lb.EndpointIDs = make([]string, 0, len(w.Backends))
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
	// In backend (address) order: the order we created the LB with, so
	// sameLB's comparison is mostly the fast, ordered one.
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
	if a != nil {
		a.kind = w.Kind
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
				r.countLBFailure(metrics.LBUpdate, w.Kind, err)
				p.st.updateOff = true
				p.log.Info("HNS cannot modify load balancers; deleting and recreating them from now on")
			default:
				r.countLBFailure(metrics.LBUpdate, w.Kind, err)
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
		r.countLBFailure(metrics.LBCreate, w.Kind, err)
		r.fail(fmt.Errorf("creating load balancer %s for %s: %w", w.Key, owner, err))
		return false
	}
	p.st.lbs[w.Key] = &appliedLB{lb: created, owner: owner, owned: true, kind: w.Kind}
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
		r.countLBFailure(metrics.LBDelete, a.kind, err)
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
	var ips []netip.Addr
	if r.full {
		for _, ep := range r.listedRemotes {
			if p.st.remoteRefs[ep.IP] == 0 && (hasPrefix(ep.Name, RemoteEndpointNamePrefix) || p.st.referenced[ep.IP]) {
				ips = append(ips, ep.IP)
			}
		}
	} else {
		ips = make([]netip.Addr, 0, len(r.unused))
		for ip := range r.unused {
			ips = append(ips, ip)
		}
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

// countLBFailure counts a failed HNS load-balancer operation in kube-proxy
// v1.37's winkernel failure metrics.
func (r *syncRun) countLBFailure(op string, kind lbKind, err error) {
	r.p.cfg.Metrics.IncWinKernelLBFailure(op, r.p.cfg.IPFamily, lbTypeLabel(kind), lbErrorLabel(err))
}

// lbTypeLabel is kube-proxy's lb_type label for an LB kind. An adopted LB
// no plan has claimed yet has no kind: "unknown" (kube-proxy, which deletes
// every LB at start-up instead of adopting, has no such LB).
func lbTypeLabel(k lbKind) string {
	switch k {
	case kindClusterIP:
		return "clusterip"
	case kindNodePort:
		return "nodeport"
	case kindExternalIP:
		return "externalip"
	case kindLoadBalancer:
		return "ingressip"
	case kindHealthCheck:
		return "healthcheck"
	}
	return "unknown"
}

// lbErrorLabel is kube-proxy's error label for an HNS error.
func lbErrorLabel(err error) string {
	switch {
	case errors.Is(err, ErrPortAlreadyExists):
		return "port_already_exists"
	case errors.Is(err, ErrNetworkNotFound):
		return "network_not_found"
	case errors.Is(err, ErrNotImplemented):
		return "not_implemented"
	case errors.Is(err, ErrInvalidIP):
		return "invalid_ip"
	}
	return "other"
}
