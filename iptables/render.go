package iptables

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// renderer holds the buffers and the last applied state; it turns the plan
// into iptables-restore input, either for every service (full) or for the
// services that changed (partial). It does no I/O.
type renderer struct {
	env        planEnv
	mark       string
	randomFull bool

	// applied is the state the last successful sync wrote.
	applied map[proxy.ServicePortName]*servicePlan
	byName  map[types.NamespacedName][]proxy.ServicePortName

	// pending is what the sync being applied will make of applied.
	pendingFull    map[proxy.ServicePortName]*servicePlan
	pendingChanged []pendingService

	out    lineWriter // the payload: nat section, then filter
	filter lineWriter // filter section body
	// decl are the nat chains to declare (create, or flush if they exist):
	// written chains and chains to delete. They are written in one block
	// ahead of every rule, in descending order: iptables-restore (legacy
	// and nft alike) inserts each new chain into a sorted list, and
	// declarations interleaved with rules, or in ascending order, make
	// that scan quadratic (BenchmarkKernelSync; BENCHMARKS.md's changelog
	// has the before and after).
	decl []xtables.Chain
	// existing are the nat chains the kernel has (full syncs, from
	// iptables-save). Those a service rewrites are declared just before its
	// rules instead of in the block: iptables-restore announces every
	// declared chain into libxtables' fixed-size hash of non-target names,
	// which every "-j" of every later rule searches, so declaring all
	// 110,000 chains of 10,000 services first makes each lookup scan
	// buckets twice as full on average. Declaring an existing chain only
	// flushes it, which costs the same anywhere in the payload (measured
	// on a legacy re-apply: BenchmarkKernelSync in BENCHMARKS.md).
	existing tableSums
	// seenMark numbers the full renders over existing: a chain a service
	// wants is marked with it (chainSum.seen), and the existing service
	// chains left unmarked are deleted.
	seenMark uint32
	// declHints are where the full render declared each existing chain
	// (the offset of its ":" line in the payload) with its digest, so the
	// chain compare that follows needs no lookup of it (reducePayload).
	declHints []declHint
	svcOut    lineWriter // one service's own rules, before they join out
	// declScratch backs servicePlan.decl while a service is written.
	declScratch []xtables.Chain
	staleX      lineWriter // deletions, after every rule referencing them is gone
	tail        []string   // nat KUBE-SERVICES tail rules (to KUBE-NODEPORTS)
	names       []proxy.ServicePortName
	// natLines and filterLines count the rules of the last payload.
	natLines, filterLines int
	// sizeHint is the payload size of the last full sync, to allocate the
	// next one in one go; the buffer itself is not kept when large.
	sizeHint int
	// opsHint is its number of lines (ops), for the same.
	opsHint int
	// fullRender is set while renderFull runs.
	fullRender bool
}

type pendingService struct {
	name proxy.ServicePortName
	plan *servicePlan // nil: the service port is gone
}

// renderStats counts what a render wrote.
type renderStats struct {
	rules, services int
}

// renderFull writes every service. existing are the nat chains known to
// exist in the kernel (from iptables-save, or the digests carried since);
// the service chains among them that are not wanted are deleted.
func (r *renderer) renderFull(services changetracker.ServicePortMap, endpoints changetracker.EndpointsMap, existing tableSums) restorePayload {
	r.out.reset()
	// Sized as the last full render (a little more), or on the first one
	// from the workload rather than grown by appending
	// (BenchmarkSyncCold measures the difference). On the first, both the
	// text and the ops are sized from estimates without slack: the ops
	// from a count of lines, which does not depend on names' lengths; the
	// text from fullPayloadEstimate, which is itself the margin (above the
	// benchmark workload's text by a sixth; the names' lengths enter only
	// the per-service lines once endpoint comments are left out at scale,
	// so a longer name grows a large payload by far less than that, and a
	// small payload that outgrows it is cheap to grow).
	size, ops, slack, opsSlack := r.sizeHint, r.opsHint, 32, 32
	if size == 0 {
		eps := countEndpoints(endpoints)
		size, slack = fullPayloadEstimate(len(services), eps), 0
		ops, opsSlack = fullLinesEstimate(len(services), eps), 0
	}
	if cap(r.out.buf) < size {
		if slack > 0 {
			size += size / slack
		}
		r.out.buf = make([]byte, 0, size)
	}
	if cap(r.out.ops) < ops {
		if opsSlack > 0 {
			ops += ops / opsSlack
		}
		r.out.ops = make([]restoreOp, 0, ops)
	}
	r.filter.reset()
	r.decl = r.decl[:0]
	r.staleX.reset()
	r.pendingChanged = r.pendingChanged[:0]
	plans := make(map[proxy.ServicePortName]*servicePlan, len(services))
	r.fullRender = true
	r.existing = existing
	r.declHints = r.declHints[:0]
	if len(existing) > 0 {
		r.seenMark++
		if r.seenMark == 0 {
			r.seenMark = 1
		}
	}
	defer func() { r.fullRender, r.existing = false, nil }()

	w := &r.out
	w.raw("*nat")
	r.decl = append(r.decl, fixedNATChains...)
	writeFixedNATRules(w, r.mark, r.randomFull)

	f := &r.filter
	f.raw("*filter")
	for _, c := range fixedFilterChains {
		f.chainLine(c)
	}
	writeLocalnetFilterRules(f, &r.env)
	writeFixedFilterRules(f, r.mark)

	r.names = slices.Grow(r.names[:0], len(services))
	for name := range services {
		r.names = append(r.names, name)
	}
	slices.SortFunc(r.names, compareServicePortNames)
	// Every chain is declared: one per endpoint, up to four per service.
	if n := countEndpoints(endpoints) + 2*len(services) + len(fixedNATChains); cap(r.decl) < n {
		r.decl = slices.Grow(r.decl, n)
	}
	var gone []xtables.Chain
	for _, name := range r.names {
		p := &servicePlan{}
		r.writeService(name, services[name], endpoints[name], p, nil)
		plans[name] = p
		if old := r.applied[name]; old != nil && !slices.Equal(old.chains, p.chains) {
			for _, c := range old.chains {
				if !slices.Contains(p.chains, c) {
					gone = append(gone, c)
				}
			}
		}
	}
	for _, t := range r.tail {
		w.raw(t)
	}
	// Chains of services gone: from our last state, and from the kernel
	// (left by an earlier run, or by kube-proxy).
	for name, old := range r.applied {
		if _, ok := plans[name]; !ok {
			gone = append(gone, old.chains...)
		}
	}
	// writeService marked the existing chains a service wants (in a full
	// render every chain of a plan is declared).
	for c, s := range existing {
		if s.seen != r.seenMark && isServiceChain(c) {
			gone = append(gone, xtables.Chain(c))
		}
	}
	slices.Sort(gone)
	gone = slices.Compact(gone)
	for _, c := range gone {
		r.deleteChain(c)
	}
	r.pendingFull = plans
	return r.payload(r.finish(true))
}

// fullPayloadEstimate is about the size of a full payload: per endpoint
// its KUBE-SEP chain (declaration, mark and DNAT rules, ~230 bytes) and
// its rule in the service chain (~100 bytes); per service port its
// chains and dispatch rules (~600 bytes). Measured on the benchmark
// workload: 3.3 MB at 1,000 services, 33 MB at 10,000 (which this puts
// at 39 MB).
func fullPayloadEstimate(servicePorts, endpoints int) int {
	return 330*endpoints + 600*servicePorts
}

// fullLinesEstimate is about the number of lines of a full payload, a
// little above: per endpoint four (its KUBE-SEP chain's declaration, mark
// and DNAT rules, and its rule in the service chain), per service port
// four (its KUBE-SVC chain's declaration and masquerade rule, its
// dispatch rule, and one for the external chains some have), and the
// fixed chains and rules. The benchmark workload writes 434,021 lines at
// 10,000 services (of ten endpoints, every tenth a node port), this says
// 440,064. A workload that writes more lines per endpoint (session
// affinity) grows the ops by appending.
func fullLinesEstimate(servicePorts, endpoints int) int {
	return 4*endpoints + 4*servicePorts + 64
}

// renderPartial writes only the services named in changed: their chains are
// rewritten, chains they no longer need deleted, and their rules in the
// shared chains added or deleted one by one. Nothing else is touched, so
// the payload is proportional to the change, not to the number of services.
func (r *renderer) renderPartial(services changetracker.ServicePortMap, endpoints changetracker.EndpointsMap, changed sets.Set[types.NamespacedName], ports map[types.NamespacedName][]proxy.ServicePortName) restorePayload {
	r.out.reset()
	r.filter.reset()
	r.decl = r.decl[:0]
	r.staleX.reset()
	r.pendingFull = nil
	r.pendingChanged = r.pendingChanged[:0]
	if len(changed) == 0 {
		return restorePayload{}
	}
	r.out.raw("*nat")
	r.filter.raw("*filter")

	// Current ports of the changed services, from the tracker's index (no
	// walk over the service map; nothing is written for unchanged services).
	r.names = r.names[:0]
	for nn := range changed {
		for _, name := range ports[nn] {
			if _, ok := services[name]; ok {
				r.names = append(r.names, name)
			}
		}
	}
	for nn := range changed {
		for _, old := range r.byName[nn] {
			if _, still := services[old]; !still {
				r.names = append(r.names, old)
			}
		}
	}
	slices.SortFunc(r.names, compareServicePortNames)
	for _, name := range r.names {
		old := r.applied[name]
		svc, ok := services[name]
		if !ok {
			// Port gone: delete its shared rules and chains.
			if old != nil {
				r.diffShared(old, nil)
				for _, c := range old.chains {
					r.deleteChain(c)
				}
			}
			r.pendingChanged = append(r.pendingChanged, pendingService{name: name})
			continue
		}
		p := &servicePlan{}
		r.writeService(name, svc, endpoints[name], p, old)
		r.pendingChanged = append(r.pendingChanged, pendingService{name: name, plan: p})
	}
	return r.payload(r.finish(false))
}

// writeService plans one service port and writes it: its chain
// declarations, its shared rules (all of them for a full sync, else the
// difference with old), and its own rules.
func (r *renderer) writeService(name proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint, p *servicePlan, old *servicePlan) {
	info := asServicePortInfo(name, svc)
	// Sized once (its chains: one per endpoint plus up to four), and the
	// transient declarations in a slice reused across services.
	if p.chains == nil {
		p.chains = make([]xtables.Chain, 0, len(eps)+4)
	}
	p.decl = r.declScratch[:0]
	defer func() { r.declScratch = p.decl[:0]; p.decl = nil }()
	r.env.keepEndpointChains = nil
	if old != nil && !r.fullRender && old.sticky == (info.SessionAffinityType() == v1.ServiceAffinityClientIP) {
		r.env.keepEndpointChains = old.chains
	}
	if r.fullRender && len(r.existing) > 0 {
		// Existing chains are declared (flushed) right before the
		// service's rules; new ones go to the sorted block.
		r.svcOut.reset()
		planService(&r.env, info, eps, p, &r.svcOut)
		for _, c := range p.decl {
			if s := r.existing[string(c)]; s != nil {
				s.seen = r.seenMark
				r.declHints = append(r.declHints, declHint{off: uint32(len(r.out.buf)), sum: s})
				r.out.chainLine(c)
			} else {
				r.decl = append(r.decl, c)
			}
		}
		r.out.appendWriter(&r.svcOut)
	} else {
		planService(&r.env, info, eps, p, &r.out)
		r.decl = append(r.decl, p.decl...)
	}
	r.env.keepEndpointChains = nil
	if r.fullRender {
		r.writeShared(p)
		return
	}
	r.diffShared(old, p)
	if old != nil {
		for _, c := range old.chains {
			if !slices.Contains(p.chains, c) {
				r.deleteChain(c)
			}
		}
	}
}

func (r *renderer) declSize(chains []xtables.Chain) int {
	n := 0
	for _, c := range chains {
		n += len(c) + len(": - [0:0]\n")
	}
	return n
}

// writeShared appends every shared rule of p (full sync: the shared chains
// were just flushed by their declarations).
func (r *renderer) writeShared(p *servicePlan) {
	for i := range p.shared {
		w := r.writerFor(sharedChain(i))
		for _, spec := range p.shared[i] {
			w.rule(sharedChains[i].chain).w(spec).end()
		}
	}
}

// diffShared deletes the shared rules of old that p lacks and adds those of
// p that old lacks.
func (r *renderer) diffShared(old, p *servicePlan) {
	for i := range numShared {
		var o, n []string
		if old != nil {
			o = old.shared[i]
		}
		if p != nil {
			n = p.shared[i]
		}
		w := r.writerFor(i)
		ch := sharedChains[i]
		for _, spec := range o {
			if !slices.Contains(n, spec) {
				w.op("-D", ch.chain).w(spec).end()
			}
		}
		for _, spec := range n {
			if !slices.Contains(o, spec) {
				op := "-A"
				if ch.insert {
					op = "-I"
				}
				w.op(op, ch.chain).w(spec).end()
			}
		}
	}
}

func (r *renderer) writerFor(i sharedChain) *lineWriter {
	if sharedChains[i].table == xtables.TableFilter {
		return &r.filter
	}
	return &r.out
}

// deleteChain flushes (by declaring) and deletes a nat chain, at the end of
// the nat section, after every rule that referenced it was rewritten.
func (r *renderer) deleteChain(c xtables.Chain) {
	r.decl = append(r.decl, c)
	r.staleX.op("-X", c).end()
}

// finish closes the sections and returns the payload; nil when a partial
// sync has nothing to write.
func (r *renderer) finish(full bool) []byte {
	r.insertDecls()
	natEmpty := r.out.lines == 1 && r.staleX.lines == 0
	filterEmpty := r.filter.lines == 1
	r.natLines, r.filterLines = r.out.lines+r.staleX.lines-1, r.filter.lines-1
	if !full && natEmpty && filterEmpty {
		return nil
	}
	if natEmpty && !full {
		r.out.reset()
	} else {
		r.out.appendWriter(&r.staleX)
		r.out.raw("COMMIT")
	}
	if !filterEmpty || full {
		r.out.appendWriter(&r.filter)
		r.out.raw("COMMIT")
	}
	return r.out.buf
}

// payload is the text and ops of the last render (finish's).
func (r *renderer) payload(text []byte) restorePayload {
	if text == nil {
		return restorePayload{}
	}
	return restorePayload{text: text, ops: r.out.ops}
}

// releaseLarge drops a payload buffer too large to be worth keeping for
// the (small) partial syncs; the next full sync allocates it at the right
// size in one go.
func (r *renderer) releaseLarge() {
	const keep = 4 << 20
	if r.fullRender || cap(r.out.buf) <= keep {
		return
	}
	r.sizeHint, r.opsHint = len(r.out.buf), len(r.out.ops)
	r.out.buf = nil
	r.out.ops = nil
}

// insertDecls writes the declarations block right after "*nat".
func (r *renderer) insertDecls() {
	if len(r.decl) == 0 {
		return
	}
	// Descending: sorting ascending with the ordered comparison and then
	// reversing is about twice as fast as a descending comparator (111,000
	// names at 10,000 services).
	slices.Sort(r.decl)
	r.decl = slices.Compact(r.decl)
	slices.Reverse(r.decl)
	const at = len("*nat\n")
	size := r.declSize(r.decl)
	n := len(r.out.buf)
	r.out.buf = slices.Grow(r.out.buf, size)[:n+size]
	copy(r.out.buf[at+size:], r.out.buf[at:n])
	d := r.out.buf[at:at]
	for _, c := range r.decl {
		d = append(d, ':')
		d = append(d, c...)
		d = append(d, " - [0:0]\n"...)
	}
	r.out.lines += len(r.decl)
	// Their ops, after the header's, and every later op moved by size.
	ops := r.out.ops
	n = len(ops)
	ops = slices.Grow(ops, len(r.decl))[:n+len(r.decl)]
	copy(ops[1+len(r.decl):], ops[1:n])
	for i := 1 + len(r.decl); i < len(ops); i++ {
		ops[i].End += uint32(size)
	}
	end := uint32(at)
	for i, c := range r.decl {
		end += uint32(len(c) + len(": - [0:0]\n"))
		ops[1+i] = restoreOp{End: end, Kind: opDeclare, Name: uint8(len(c))}
	}
	r.out.ops = ops
	r.decl = r.decl[:0]
	for i := range r.declHints {
		r.declHints[i].off += uint32(size) // every one lies after the block
	}
}

// commit makes the pending state the applied one (after a successful restore).
func (r *renderer) commit() {
	if r.pendingFull != nil {
		r.applied = r.pendingFull
		r.byName = make(map[types.NamespacedName][]proxy.ServicePortName, len(r.applied))
		for name := range r.applied {
			r.byName[name.NamespacedName] = append(r.byName[name.NamespacedName], name)
		}
		r.pendingFull = nil
		return
	}
	for _, ps := range r.pendingChanged {
		nn := ps.name.NamespacedName
		if ps.plan == nil {
			delete(r.applied, ps.name)
			r.byName[nn] = slices.DeleteFunc(r.byName[nn], func(n proxy.ServicePortName) bool { return n == ps.name })
			if len(r.byName[nn]) == 0 {
				delete(r.byName, nn)
			}
			continue
		}
		if _, had := r.applied[ps.name]; !had {
			r.byName[nn] = append(r.byName[nn], ps.name)
		}
		r.applied[ps.name] = ps.plan
	}
	r.pendingChanged = r.pendingChanged[:0]
}

// discard forgets the pending state (after a failed restore).
func (r *renderer) discard() {
	r.pendingFull = nil
	r.pendingChanged = r.pendingChanged[:0]
}

// setTail computes the nat KUBE-SERVICES tail rules that send traffic to
// node ports into KUBE-NODEPORTS.
func (r *renderer) setTail(family v1.IPFamily, cidrs []netip.Prefix, local []netip.Addr) {
	r.tail = r.tail[:0]
	const comment = `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`
	ipv6 := family == v1.IPv6Protocol
	matchAll := len(cidrs) == 0
	var own []netip.Prefix
	for _, c := range cidrs {
		if c.Addr().Is4() == ipv6 {
			continue
		}
		own = append(own, c)
		if c.Bits() == 0 {
			matchAll = true
		}
	}
	if len(cidrs) > 0 && len(own) == 0 {
		// Only CIDRs of the other family: no node ports in this one.
		return
	}
	if matchAll {
		r.tail = append(r.tail, comment+" -m addrtype --dst-type LOCAL"+localnetTailExclusion(ipv6, r.env.localhostNodePorts)+" -j KUBE-NODEPORTS")
		return
	}
	var ips []netip.Addr
	for _, ip := range local {
		ip = ip.Unmap()
		if ip.Is4() == ipv6 || (ip.IsLoopback() && !r.env.localhostNodePorts) {
			continue
		}
		for _, c := range own {
			if c.Contains(ip) {
				ips = append(ips, ip)
				break
			}
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	for _, ip := range ips {
		r.tail = append(r.tail, comment+" -d "+ip.String()+" -j KUBE-NODEPORTS")
	}
}

func compareServicePortNames(a, b proxy.ServicePortName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if c := strings.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return strings.Compare(string(a.Protocol), string(b.Protocol))
}
