//go:build linux

package nftables

import (
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/proxy"
)

// Localhost node ports (Config.LocalhostNodePorts, upstream's
// KubeProxyNFTablesLocalhostNodePorts gate, v1.37).
//
// The table never DNATs traffic to loopback node ports (the dispatch rules
// match "daddr != 127.0.0.0/8" or the node-port addresses, which never
// hold a loopback address). With the gate on, such traffic is either
// served by a userspace TCP proxy listening on 127.0.0.1 (::1) at the node
// port (when NodePortAddresses explicitly names loopback), or rejected by
// the table and counted in a named counter per protocol:
//
//	map localhost-nodeport-reject-ports { type inet_proto . inet_service : verdict }
//	counter localhost-nodeport-rejected-udp
//	chain localhost-nodeport-reject-udp { counter name "localhost-nodeport-rejected-udp" reject }
//	chain nodeport-endpoints-check { ...; ip daddr 127.0.0.0/8 meta l4proto . th dport vmap @localhost-nodeport-reject-ports }
//	element: udp . 30053 : goto localhost-nodeport-reject-udp
//
// With the proxy, UDP and SCTP node ports are rejected (it serves TCP
// only); without it, all three. Upstream's names, so a node moves between
// the two either way.

const (
	mapLocalhostNodePortReject    = "localhost-nodeport-reject-ports"
	prefixLocalhostRejectChain    = "localhost-nodeport-reject-"
	prefixLocalhostRejectCounter  = "localhost-nodeport-rejected-"
	localhostNodePortRejectMapTyp = "inet_proto . inet_service : verdict"
	localhostNodePortRejectMapCmt = "localhost NodePorts rejected by kube-proxy"
)

// localhostRejectableProtocols are every protocol whose localhost node
// ports may be rejected, in upstream's order.
var localhostRejectableProtocols = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}

// LocalhostRejectChain names the chain that counts and rejects localhost
// node-port traffic of protocol (upstream's name).
func LocalhostRejectChain(protocol v1.Protocol) string {
	return prefixLocalhostRejectChain + proxy.LowerProtocol(protocol)
}

// LocalhostRejectCounter names the named counter of the packets rejected
// on localhost node ports of protocol (upstream's
// metrics.LocalhostNodePortRejectedCounterName).
func LocalhostRejectCounter(protocol v1.Protocol) string {
	return prefixLocalhostRejectCounter + proxy.LowerProtocol(protocol)
}

// localhostMode is what the gate and the node-port addresses make of
// localhost node ports.
type localhostMode struct {
	enabled bool // Config.LocalhostNodePorts
	proxy   bool // the userspace proxy serves TCP node ports on loopback
}

// newLocalhostMode: the proxy runs when the gate is on and the node-port
// addresses of family name a loopback prefix themselves (127.0.0.0/8,
// ::1/128; not a prefix that merely contains loopback, such as 0.0.0.0/0),
// as upstream's ContainsExplicitLoopback. Prefixes of the other family do
// not count.
func newLocalhostMode(enabled bool, family v1.IPFamily, npa []netip.Prefix) localhostMode {
	m := localhostMode{enabled: enabled}
	if !enabled {
		return m
	}
	v4 := family != v1.IPv6Protocol
	for _, p := range npa {
		if a := p.Masked().Addr(); a.Is4() == v4 && a.IsLoopback() {
			m.proxy = true
		}
	}
	return m
}

// rejects lists the protocols whose localhost node ports the table
// rejects (nil: none, the gate is off).
func (m localhostMode) rejects() []v1.Protocol {
	switch {
	case !m.enabled:
		return nil
	case m.proxy:
		return []v1.Protocol{v1.ProtocolUDP, v1.ProtocolSCTP}
	default:
		return localhostRejectableProtocols
	}
}

func (m localhostMode) rejectsProtocol(p v1.Protocol) bool {
	for _, r := range m.rejects() {
		if r == p {
			return true
		}
	}
	return false
}

// planLocalhostStatic adds the fixed localhost objects to st: the jump
// rule in nodeport-endpoints-check (to rules) and, per rejected protocol,
// its chain; the map and counters are declared by the change set
// (localhostObjects).
func (p *planner) planLocalhostStatic(add func(chain, text, comment string)) []chainSpec {
	rejects := p.localhost.rejects()
	if len(rejects) == 0 {
		return nil
	}
	match := "ip daddr 127.0.0.0/8"
	if p.ipX == "ip6" {
		match = "ip6 daddr ::1"
	}
	add(chainNodePortEndpointsCheck, match+" meta l4proto . th dport vmap @"+mapLocalhostNodePortReject, "")
	var chains []chainSpec
	for _, proto := range rejects {
		c := chainSpec{name: LocalhostRejectChain(proto), rules: []ruleSpec{
			textRule("counter name "+strconv.Quote(LocalhostRejectCounter(proto))+" reject", ""),
		}}
		c.hash = chainHash(nil, c.rules)
		chains = append(chains, c)
	}
	return chains
}

// planLocalhostNodePort adds the reject element of the port's node port
// when its protocol is rejected on loopback.
func (p *planner) planLocalhostNodePort(sp *servicePlan, pp *portPlan) {
	np := pp.svc.NodePort()
	if np == 0 || !p.localhost.rejectsProtocol(pp.svc.Protocol()) {
		return
	}
	sp.addElem(ctrLocalhostNodePortReject, protoPortKey(pp.protoNum, uint16(np)), gotoVerdict(LocalhostRejectChain(pp.svc.Protocol())), "")
}

// localhostObjects is the change to the localhost reject map and counters
// one full sync makes (the chains go as the other fixed chains).
type localhostObjects struct {
	// declare: add the map and these counters (nft's add leaves existing
	// ones as they are).
	declare  bool
	counters []string
	// remove: delete the map (the gate went off), these chains and
	// counters (protocols no longer rejected).
	removeMap      bool
	removeChains   []string
	removeCounters []string
}

func (o *localhostObjects) empty() bool {
	return o == nil || (!o.declare && !o.removeMap && len(o.removeChains) == 0)
}

// diffLocalhost compares the localhost objects st holds with what mode
// wants. want are the planned reject chains.
func diffLocalhost(st *tableState, mode localhostMode, want []chainSpec) *localhostObjects {
	o := &localhostObjects{}
	rejects := mode.rejects()
	if len(rejects) > 0 {
		missing := !st.localhostMap
		for _, proto := range rejects {
			o.counters = append(o.counters, LocalhostRejectCounter(proto))
			if _, ok := st.chains[LocalhostRejectChain(proto)]; !ok {
				missing = true
			}
		}
		o.declare = missing
	} else if st.localhostMap {
		o.removeMap = true
	}
	for _, proto := range localhostRejectableProtocols {
		if containsChain(want, LocalhostRejectChain(proto)) {
			continue
		}
		if _, ok := st.chains[LocalhostRejectChain(proto)]; ok {
			o.removeChains = append(o.removeChains, LocalhostRejectChain(proto))
			o.removeCounters = append(o.removeCounters, LocalhostRejectCounter(proto))
		}
	}
	if o.empty() {
		return nil
	}
	return o
}

// split separates o's removal of chains and counters (for the sync's
// last transaction, after the elements that jump to the chains are
// deleted) from the rest (for its first).
func (o *localhostObjects) split() (first, last *localhostObjects) {
	if o == nil {
		return nil, nil
	}
	if len(o.removeChains) > 0 {
		last = &localhostObjects{removeChains: o.removeChains, removeCounters: o.removeCounters}
		o.removeChains, o.removeCounters = nil, nil
	}
	if o.empty() {
		o = nil
	}
	return o, last
}

// isLocalhostRejectChain: a chain of the localhost reject objects (fixed,
// not a service's).
func isLocalhostRejectChain(name string) bool {
	for _, proto := range localhostRejectableProtocols {
		if name == LocalhostRejectChain(proto) {
			return true
		}
	}
	return false
}

// ops is the number of nft commands render writes for o.
func (o *localhostObjects) ops() int {
	if o == nil {
		return 0
	}
	n := 0
	if o.declare {
		n += 1 + len(o.counters)
	}
	if o.removeMap {
		n++
	}
	return n + 3*len(o.removeChains) + 2*len(o.removeCounters)
}

// commit records o in st once the kernel took it.
func (o *localhostObjects) commit(st *tableState) {
	if o == nil {
		return
	}
	if o.declare {
		st.localhostMap = true
	}
	if o.removeMap {
		st.localhostMap = false
		clear(st.elems[ctrLocalhostNodePortReject])
	}
	for _, n := range o.removeChains {
		delete(st.chains, n)
		delete(st.counts, n)
		delete(st.stale, n)
	}
}

// renderLocalhostDeclare adds the map and counters (after the table is
// declared, before any rule refers to them).
func renderLocalhostDeclare(tx *knftables.Transaction, o *localhostObjects) {
	if o == nil || !o.declare {
		return
	}
	tx.Add(&knftables.Map{Name: mapLocalhostNodePortReject, Type: localhostNodePortRejectMapTyp,
		Comment: ptr.To(localhostNodePortRejectMapCmt)})
	for _, c := range o.counters {
		tx.Add(&knftables.Counter{Name: c})
	}
}

// renderLocalhostRemovals deletes what o removes, last (after the rule
// that looked the map up was replaced): the map (its elements refer to the
// chains), then each chain (its rule refers to the counter), then the
// counter, which is added first so that deleting it succeeds whether or
// not it exists.
func renderLocalhostRemovals(tx *knftables.Transaction, o *localhostObjects) {
	if o == nil {
		return
	}
	if o.removeMap {
		tx.Delete(&knftables.Map{Name: mapLocalhostNodePortReject})
	}
	for _, n := range o.removeChains {
		tx.Add(&knftables.Chain{Name: n})
		tx.Flush(&knftables.Chain{Name: n})
		tx.Delete(&knftables.Chain{Name: n})
	}
	for _, n := range o.removeCounters {
		tx.Add(&knftables.Counter{Name: n})
		tx.Delete(&knftables.Counter{Name: n})
	}
}
