package ipvs

import (
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
)

// kernelState is what a full sync reads back.
type kernelState struct {
	vss     map[VirtualServerKey]*VirtualServer
	rss     map[VirtualServerKey][]*RealServer
	addrs   map[netip.Addr]bool // on kube-ipvs0
	sets    map[string]Set
	entries map[string]map[Entry]bool
}

// setupNode does what every full sync checks: the dummy link, the sysctls
// and (once) the IPVS timeouts.
func (p *Proxier) setupNode() error {
	if _, err := p.ifs.Netlink.EnsureDummyDevice(DummyDevice); err != nil {
		return fmt.Errorf("ipvs: ensure %s: %w", DummyDevice, err)
	}
	want := []struct {
		name  string
		value int
	}{
		{"net/ipv4/vs/conntrack", 1},
		{"net/ipv4/vs/expire_nodest_conn", 1},
		{"net/ipv4/vs/expire_quiescent_template", 1},
	}
	if p.cfg.IPFamily == v1.IPv6Protocol {
		want = append(want, struct {
			name  string
			value int
		}{"net/ipv6/conf/all/forwarding", 1})
	} else {
		want = append(want, struct {
			name  string
			value int
		}{"net/ipv4/ip_forward", 1})
	}
	if p.cfg.ConnReuseMode != nil {
		want = append(want, struct {
			name  string
			value int
		}{"net/ipv4/vs/conn_reuse_mode", *p.cfg.ConnReuseMode})
	}
	if p.cfg.StrictARP {
		want = append(want, struct {
			name  string
			value int
		}{"net/ipv4/conf/all/arp_ignore", 1}, struct {
			name  string
			value int
		}{"net/ipv4/conf/all/arp_announce", 2})
	}
	for _, w := range want {
		if v, err := p.ifs.Sysctl.Get(w.name); err == nil && v == w.value {
			continue
		}
		if err := p.ifs.Sysctl.Set(w.name, w.value); err != nil {
			return fmt.Errorf("ipvs: %w", err)
		}
	}
	if !p.setupDone && (p.cfg.TCPTimeout > 0 || p.cfg.TCPFinTimeout > 0 || p.cfg.UDPTimeout > 0) {
		if err := p.ifs.IPVS.SetTimeouts(Timeouts{TCP: p.cfg.TCPTimeout, TCPFin: p.cfg.TCPFinTimeout, UDP: p.cfg.UDPTimeout}); err != nil {
			return fmt.Errorf("ipvs: set timeouts: %w", err)
		}
	}
	p.setupDone = true
	return nil
}

// computeNodePortAddrs lists the node's addresses that serve node ports.
func (p *Proxier) computeNodePortAddrs() ([]netip.Addr, error) {
	all, err := p.ifs.Netlink.LocalAddresses(p.cfg.IPFamily, DummyDevice)
	if err != nil {
		return nil, fmt.Errorf("ipvs: list node addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range all {
		a = a.Unmap()
		if a.IsLoopback() || a.IsLinkLocalUnicast() || a.Is4() != (p.cfg.IPFamily == v1.IPv4Protocol) {
			continue
		}
		if len(p.cfg.NodePortAddresses) > 0 && !slices.ContainsFunc(p.cfg.NodePortAddresses, func(pr netip.Prefix) bool { return pr.Contains(a) }) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// readKernel reads back every virtual server (with real servers), the
// kube-ipvs0 addresses and our sets.
func (p *Proxier) readKernel() (*kernelState, error) {
	k := &kernelState{
		vss:     make(map[VirtualServerKey]*VirtualServer),
		rss:     make(map[VirtualServerKey][]*RealServer),
		addrs:   make(map[netip.Addr]bool),
		sets:    make(map[string]Set),
		entries: make(map[string]map[Entry]bool),
	}
	vss, err := p.ifs.IPVS.GetVirtualServers()
	if err != nil {
		return nil, err
	}
	for _, vs := range vss {
		key := vs.Key()
		k.vss[key] = vs
		rss, err := p.ifs.IPVS.GetRealServers(vs)
		if err != nil {
			return nil, err
		}
		k.rss[key] = rss
	}
	addrs, err := p.ifs.Netlink.ListBindAddresses(DummyDevice)
	if err != nil && !isNotFound(err) { // no kube-ipvs0: nothing bound
		return nil, err
	}
	for _, a := range addrs {
		k.addrs[a.Unmap()] = true
	}
	sets, err := p.ifs.IPSet.ListSets()
	if err != nil {
		return nil, err
	}
	for _, s := range sets {
		if _, ours := p.setSpecs[s.Name]; !ours {
			continue
		}
		k.sets[s.Name] = s
		es, err := p.ifs.IPSet.ListEntries(s.Name)
		if err != nil {
			return nil, err
		}
		m := make(map[Entry]bool, len(es))
		for _, e := range es {
			m[e] = true
		}
		k.entries[s.Name] = m
	}
	return k, nil
}

func (p *Proxier) excluded(a netip.Addr) bool {
	return slices.ContainsFunc(p.cfg.ExcludeCIDRs, func(pr netip.Prefix) bool { return pr.Contains(a) })
}

func (p *Proxier) ourFamily(a netip.Addr) bool { return a.Is4() == (p.cfg.IPFamily == v1.IPv4Protocol) }

// planFull replans everything (or, when the plans are up to date, only
// what changed), reads the kernel back and returns the ops that turn it
// into the plan. It first sets up what every full sync checks (the dummy
// link, the sysctls).
func (p *Proxier) planFull(u *changetracker.Update) (opList, error) {
	if err := p.setupNode(); err != nil {
		return nil, err
	}
	npa, err := p.computeNodePortAddrs()
	if err != nil {
		return nil, err
	}
	if p.planned && slices.Equal(npa, p.nodePortAddrs) && !u.NodeChanged {
		// Plans depend only on the services, their endpoints, the node
		// labels and the node-port addresses: replan what changed, then
		// compare everything with the kernel.
		p.replanChanged(u, nil)
	} else {
		p.nodePortAddrs = npa
		in := p.planInput(u.NodeLabels, npa)
		plans := make(map[proxy.ServicePortName]*servicePlan, len(u.Services))
		byName := make(map[types.NamespacedName][]proxy.ServicePortName, len(u.Services))
		var nvs, naddrs, nentries int
		for spn, svc := range u.Services {
			sp := planService(in, spn, svc, u.Endpoints[spn])
			plans[spn] = sp
			byName[spn.NamespacedName] = append(byName[spn.NamespacedName], spn)
			nvs, naddrs, nentries = nvs+len(sp.vss), naddrs+len(sp.addrs), nentries+len(sp.entries)
		}
		// sized once: growing the maps by insertion allocated about as much
		// as they finally hold (shared addresses and entries make these
		// upper bounds)
		want := newDataplaneSized(nvs, naddrs, nentries)
		for spn, sp := range plans {
			want.replace(spn, nil, sp, nil)
		}
		p.plans, p.byName, p.dp = plans, byName, want
		p.planned = true
	}
	k, err := p.readKernel()
	if err != nil {
		return nil, fmt.Errorf("ipvs: read kernel state: %w", err)
	}
	return p.diffKernel(p.dp, k), nil
}

// diffKernel returns the ops that turn the kernel state k into want. It
// deletes only what is ours: virtual servers whose address is on
// kube-ipvs0, node-port virtual servers whose port is in our node-port
// sets, and anything we programmed ourselves; never anything inside
// ExcludeCIDRs or of the other family.
func (p *Proxier) diffKernel(want *dataplane, k *kernelState) opList {
	var ops opList
	// the entries the entry ops point at: one slab on a cold start, one
	// allocation each otherwise
	var slab []Entry
	entry := func(e Entry) *Entry {
		if len(slab) < cap(slab) {
			slab = append(slab, e)
			return &slab[len(slab)-1]
		}
		c := e // (returning &e would move every e to the heap)
		return &c
	}
	if len(k.vss) == 0 {
		// a cold start: nearly everything is added, so size the list once
		// (growing it by append copies ~145,000 ops at 10,000 services)
		n := len(setDefs) + len(want.addrs) + len(want.entries)
		for _, e := range want.vss {
			n += 1 + len(e.active().rss)
		}
		ops = make(opList, 0, n)
		slab = make([]Entry, 0, len(want.entries))
	}
	for _, s := range Sets(p.cfg.IPFamily) {
		if _, ok := k.sets[s.Name]; !ok {
			ops = append(ops, op{kind: opCreateSet, set: p.setSpec(s.Name)})
		}
	}
	for key, e := range want.vss {
		pvs := e.active()
		cur, ok := k.vss[key]
		if !ok {
			ops = append(ops, op{kind: opAddVS, vs: &pvs.vs})
			for _, ap := range pvs.rss {
				ops = append(ops, op{kind: opAddRS, weight: 1, vs: &pvs.vs, rs: ap})
			}
			continue
		}
		if !cur.Equal(&pvs.vs) {
			ops = append(ops, op{kind: opUpdateVS, vs: &pvs.vs})
		}
		ops = p.diffKernelRealServers(ops, pvs, k.rss[key])
	}
	for key, vs := range k.vss {
		if _, ok := want.vss[key]; ok || !p.ourFamily(key.Address) || p.excluded(key.Address) {
			continue
		}
		if p.owns(k, key) {
			ops = append(ops, op{kind: opDelVS, vs: vs})
		}
	}
	for a := range want.addrs {
		if !k.addrs[a] {
			ops = append(ops, addrOp(opBind, a))
		}
	}
	for a := range k.addrs {
		if want.addrs[a] == 0 && p.ourFamily(a) && !p.excluded(a) {
			ops = append(ops, addrOp(opUnbind, a))
		}
	}
	for se := range want.entries {
		if !k.entries[se.set][se.entry] {
			ops = append(ops, op{kind: opAddEntry, set: p.setSpec(se.set), entry: entry(se.entry)})
		}
	}
	for name, es := range k.entries {
		for e := range es {
			if want.entries[setEntry{set: name, entry: e}] == 0 {
				ops = append(ops, op{kind: opDelEntry, set: p.setSpec(name), entry: entry(e)})
			}
		}
	}
	sortOps(ops)
	return ops
}

// owns: key is a virtual server of ours (see diffKernel).
func (p *Proxier) owns(k *kernelState, key VirtualServerKey) bool {
	_, created := p.owned[key]
	return created || k.addrs[key.Address] || p.dp.vss[key] != nil || p.ownedNodePort(k, key)
}

// diffKernelRealServers compares the wanted real servers (sorted) with the
// kernel's by a merge walk (no per-service maps: this runs for every
// virtual server on every full sync).
func (p *Proxier) diffKernelRealServers(ops opList, pvs *plannedVS, have []*RealServer) opList {
	if !slices.IsSortedFunc(have, func(a, b *RealServer) int { return a.AddrPort().Compare(b.AddrPort()) }) {
		have = slices.Clone(have)
		slices.SortFunc(have, func(a, b *RealServer) int { return a.AddrPort().Compare(b.AddrPort()) })
	}
	want := pvs.rss
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		var c int
		switch {
		case i == len(want):
			c = 1
		case j == len(have):
			c = -1
		default:
			c = want[i].Compare(have[j].AddrPort())
		}
		switch {
		case c < 0: // wanted, missing
			ops = append(ops, op{kind: opAddRS, weight: 1, vs: &pvs.vs, rs: want[i]})
			i++
		case c > 0: // in the kernel, not wanted
			rs := have[j]
			if rs.Weight == 0 && pvs.vs.Protocol != v1.ProtocolUDP {
				// draining already (perhaps since before a restart): apply
				// queues it unless it is queued
				if !p.graceful.has(pvs.vs.Key(), rs.AddrPort()) {
					ops = append(ops, rsOp(opAdoptDrain, &pvs.vs, *rs))
				}
			} else {
				ops = p.removeRealServer(ops, &pvs.vs, *rs)
			}
			j++
		default:
			if have[j].Weight != 1 {
				ops = append(ops, op{kind: opUpdateRS, weight: 1, vs: &pvs.vs, rs: want[i]})
			}
			i++
			j++
		}
	}
	return ops
}

// ownedNodePort: key is a node-port virtual server we made (its port is in
// our node-port set of its protocol, as read back from the kernel).
func (p *Proxier) ownedNodePort(k *kernelState, key VirtualServerKey) bool {
	switch key.Protocol {
	case v1.ProtocolTCP:
		return k.entries[p.sets.npTCP][Entry{Port: key.Port}]
	case v1.ProtocolUDP:
		return k.entries[p.sets.npUDP][Entry{Port: key.Port}]
	case v1.ProtocolSCTP:
		return k.entries[p.sets.npSCTP][Entry{IP: key.Address, Protocol: v1.ProtocolSCTP, Port: key.Port}]
	}
	return false
}

// sortOps orders ops by kind (creations before additions before removals),
// then by what they touch (ties by position), so plans are deterministic.
// It sorts indices and then permutes the ops in place, cycle by cycle:
// sorting the (large) op values themselves spent most of its time copying.
func sortOps(ops opList) {
	if len(ops) < 2 {
		return
	}
	idx := make([]int32, len(ops))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(i, j int32) int {
		a, b := &ops[i], &ops[j]
		if a.kind != b.kind {
			return int(a.kind) - int(b.kind)
		}
		if c := compareOp(a, b); c != 0 {
			return c
		}
		return int(i - j)
	})
	// position i takes the op at idx[i]; follow each cycle once
	for i := range idx {
		if idx[i] < 0 || int(idx[i]) == i {
			continue
		}
		tmp := ops[i]
		j := i
		for {
			k := int(idx[j])
			idx[j] = -1
			if k == i {
				ops[j] = tmp
				break
			}
			ops[j] = ops[k]
			j = k
		}
	}
}

// zeroVS and zeroEntry stand for the target an op does not have.
var (
	zeroVS    VirtualServer
	zeroEntry Entry
)

func compareOp(a, b *op) int {
	avs, bvs := a.vs, b.vs
	if avs == nil {
		avs = &zeroVS
	}
	if bvs == nil {
		bvs = &zeroVS
	}
	if c := avs.Address.Compare(bvs.Address); c != 0 {
		return c
	}
	if avs.Port != bvs.Port {
		return int(avs.Port) - int(bvs.Port)
	}
	if avs.Protocol != bvs.Protocol {
		if avs.Protocol < bvs.Protocol {
			return -1
		}
		return 1
	}
	// the real server, or the address of opBind and opUnbind
	if c := a.rs.Compare(b.rs); c != 0 {
		return c
	}
	var an, bn string
	if a.set != nil {
		an = a.set.Name
	}
	if b.set != nil {
		bn = b.set.Name
	}
	if an != bn {
		if an < bn {
			return -1
		}
		return 1
	}
	ae, be := a.entry, b.entry
	if ae == nil {
		ae = &zeroEntry
	}
	if be == nil {
		be = &zeroEntry
	}
	return compareEntry(ae, be)
}

func compareEntry(a, b *Entry) int {
	if c := a.IP.Compare(b.IP); c != 0 {
		return c
	}
	if a.Protocol != b.Protocol {
		if a.Protocol < b.Protocol {
			return -1
		}
		return 1
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	if c := a.IP2.Compare(b.IP2); c != 0 {
		return c
	}
	if c := a.Net.Addr().Compare(b.Net.Addr()); c != 0 {
		return c
	}
	return a.Net.Bits() - b.Net.Bits()
}
