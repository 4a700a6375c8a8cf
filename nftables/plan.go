//go:build linux

package nftables

import (
	"net/netip"
	"sort"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
)

// The plan: pure functions from one service's ports and endpoints (and the
// node and the config) to the nftables objects they need, as plain values.
// No I/O; the diff (state.go) and the rendering (render.go) come after.

// chainSpec is one chain and its whole content.
type chainSpec struct {
	name    string
	base    *baseChain // nil: a regular chain
	comment string     // set when the chain is created (nft ignores it on an existing chain)
	rules   []ruleSpec
	hash    string
	// nrules is len(rules) once a recorded plan's rules are released
	// (proxier.commit): a listing's rule count is checked against it.
	nrules int
}

// ruleCount is the number of rules the chain holds, released or not.
func (c *chainSpec) ruleCount() int {
	if c.rules == nil {
		return c.nrules
	}
	return len(c.rules)
}

// baseChain is a chain attached to a netfilter hook.
type baseChain struct {
	typ      string // "filter", "nat"
	hook     string
	priority string
}

// setSpec is a per-endpoint affinity set (dynamic, with a timeout).
type setSpec struct {
	name    string
	typ     string // ipv4_addr or ipv6_addr
	timeout time.Duration
}

// elemSpec is one element of one of the engine's sets and maps
// (containers), typed (elem.go).
type elemSpec struct {
	container container
	key       elemKey
	value     verdict // the zero verdict for set elements
	comment   string
}

// servicePlan is everything one Service (all its ports) needs.
type servicePlan struct {
	chains []chainSpec
	elems  []elemSpec
	eps    []epElem // endpoint maps' elements
	// x holds what few services need (nil: nothing): kept apart, a plan
	// of every service is 80 bytes instead of 128.
	x *planExtra
}

type planExtra struct {
	sets []setSpec // ClientIP affinity's
	// localhostPorts are the TCP node ports the localhost proxy serves
	// (localhost_proxy.go); not written to the table.
	localhostPorts []localhostPortSpec
}

func (sp *servicePlan) extra() *planExtra {
	if sp.x == nil {
		sp.x = &planExtra{}
	}
	return sp.x
}

func (sp *servicePlan) sets() []setSpec {
	if sp.x == nil {
		return nil
	}
	return sp.x.sets
}

func (sp *servicePlan) localhostPorts() []localhostPortSpec {
	if sp.x == nil {
		return nil
	}
	return sp.x.localhostPorts
}

func (sp *servicePlan) addChain(c chainSpec) {
	c.hash = chainHash(c.base, c.rules)
	sp.chains = append(sp.chains, c)
}

func (sp *servicePlan) addElem(c container, key elemKey, value verdict, comment string) {
	sp.elems = append(sp.elems, elemSpec{container: c, key: key, value: value, comment: comment})
}

// hasElem reports whether sp already holds the element (a hairpin entry
// two ports of the service share).
func (sp *servicePlan) hasElem(container container, key elemKey) bool {
	for i := range sp.elems {
		if sp.elems[i].container == container && sp.elems[i].key == key {
			return true
		}
	}
	return false
}

// planner holds what the plan needs besides the service itself.
type planner struct {
	family   v1.IPFamily
	ipX      string // "ip" or "ip6"
	addrType string // "ipv4_addr" or "ipv6_addr"
	masqAll  bool
	masqMark string // "0x00004000", as upstream writes it
	// masqMarkBits is masqMark's value.
	masqMarkBits uint32
	local        proxy.LocalDetector
	nodeIP       netip.Addr
	nodeName     string
	nodeLabels   map[string]string
	localhost    localhostMode // plan_localhost.go
	// slabRules, when set (a full sync's planner), has ruleBuf carve the
	// DNAT rules of the services out of shared slabs of that many rules:
	// one allocation per slab, not one per policy chain (10,000 at
	// 10,000 services). A chunk's commit drops its plans' rules, so a
	// slab lives about as long as the chunk that used it.
	slabRules int
	ruleSlab  []ruleSpec
	// slots gives policy chains their endpoint-map slots (nil: one rule
	// per endpoint everywhere).
	slots *endpointSlots
}

// ruleBuf returns an empty slice with room for n rules (and no more: an
// append beyond n reallocates rather than writing over the next chain's
// rules in the slab).
func (p *planner) ruleBuf(n int) []ruleSpec {
	if p.slabRules == 0 || n > p.slabRules/8 {
		return make([]ruleSpec, 0, n)
	}
	if cap(p.ruleSlab)-len(p.ruleSlab) < n {
		p.ruleSlab = make([]ruleSpec, 0, p.slabRules)
	}
	l := len(p.ruleSlab)
	p.ruleSlab = p.ruleSlab[:l+n]
	return p.ruleSlab[l : l : l+n]
}

func newPlanner(cfg *Config) *planner {
	p := &planner{
		family:   cfg.IPFamily,
		ipX:      "ip",
		addrType: "ipv4_addr",
		masqAll:  cfg.MasqueradeAll,
		masqMark: masqueradeMark(cfg.MasqueradeBit),
		local:    cfg.LocalDetector,
		nodeIP:   cfg.NodeIP(),
		nodeName: cfg.NodeName,
	}
	p.masqMarkBits = uint32(1) << uint(cfg.MasqueradeBit)
	if cfg.IPFamily == v1.IPv6Protocol {
		p.ipX, p.addrType = "ip6", "ipv6_addr"
	}
	p.localhost = newLocalhostMode(cfg.LocalhostNodePorts, cfg.IPFamily, cfg.NodePortAddresses)
	return p
}

func (p *planner) v6() bool { return p.ipX == "ip6" }

// masqueradeMark renders 1<<bit as upstream does ("%#08x").
func masqueradeMark(bit int) string {
	s := strconv.FormatUint(uint64(1)<<uint(bit), 16)
	for len(s) < 8 {
		s = "0" + s
	}
	return "0x" + s
}

// planService plans every port of one service. ports are its port names
// (from changetracker.Update.ServicePorts); ports missing from services
// (out of the endpoint filter's scope) are skipped. nil means the
// service needs nothing.
func (p *planner) planService(ports []proxy.ServicePortName, services map[proxy.ServicePortName]proxy.ServicePort,
	endpoints map[proxy.ServicePortName][]proxy.Endpoint) *servicePlan {
	var sp *servicePlan
	for _, spn := range ports {
		svc, ok := services[spn]
		if !ok {
			continue
		}
		if sp == nil {
			// Each port adds its cluster IP to cluster-ips and service-ips
			// (or no-endpoint-services): room for those two, not grown
			// from one.
			sp = &servicePlan{elems: make([]elemSpec, 0, 2*len(ports))}
		}
		p.planServicePort(sp, spn, svc, endpoints[spn])
	}
	return sp
}

// portPlan is what the per-concern functions share about one port.
type portPlan struct {
	spn   proxy.ServicePortName
	svc   proxy.ServicePort
	proto string
	// protoNum and portNum are proto and the service port as element
	// keys hold them.
	protoNum uint8
	portNum  uint16
	names    portNames

	clusterEndpoints, localEndpoints, reachable []proxy.Endpoint
	hasEndpoints                                bool

	clusterChain, localChain string // "" when not used
	internalChain            string // where cluster-IP traffic goes ("" none)
	hasInternal, hasExternal bool
	internalVerdict          verdict // no-endpoint verdict for the cluster IP
	externalVerdict          verdict // ... for external addresses
	usesExternalChain        bool
}

// portNames are a service port's chain names. The cluster chain's, which
// every port with endpoints uses, is made once per Service change (kept
// with the service port); the local, external and firewall chains', which
// few ports need, are made from it when a plan first asks (they share its
// base, "HASH-namespace/name/proto/port"). Keeping all four per port was
// 1.6 MB at 10,000 services.
type portNames struct {
	cluster, local, external, firewall string
}

func (n *portNames) base() string { return n.cluster[len(prefixClusterChain):] }

func (n *portNames) localChain() string {
	if n.local == "" {
		n.local = prefixLocalChain + n.base()
	}
	return n.local
}

func (n *portNames) externalChain() string {
	if n.external == "" {
		n.external = prefixExternalChain + n.base()
	}
	return n.external
}

func (n *portNames) firewallChain() string {
	if n.firewall == "" {
		n.firewall = prefixFirewallChain + n.base()
	}
	return n.firewall
}

// namesFor returns spn's names, the cluster chain's made (the others are
// made when asked).
func namesFor(spn proxy.ServicePortName, svc proxy.ServicePort) portNames {
	if w, ok := svc.(*servicePort); ok {
		return portNames{cluster: w.cluster}
	}
	// Built on the stack: every service port of a cold start makes it
	// (the joined input, its hash's text and the base were three garbage
	// strings each).
	var buf [len(prefixClusterChain) + nameBaseMax]byte
	return portNames{cluster: string(appendServiceNameBase(append(buf[:0], prefixClusterChain...), spn))}
}

func (p *planner) planServicePort(sp *servicePlan, spn proxy.ServicePortName, svc proxy.ServicePort, eps []proxy.Endpoint) {
	pp := &portPlan{
		spn:     spn,
		svc:     svc,
		proto:   proxy.LowerProtocol(svc.Protocol()),
		portNum: uint16(svc.Port()),
		names:   namesFor(spn, svc),
	}
	pp.protoNum = protoNum(pp.proto)
	pp.clusterEndpoints, pp.localEndpoints, pp.reachable, pp.hasEndpoints =
		proxy.CategorizeEndpointsShared(eps, svc, p.nodeName, p.nodeLabels)

	if len(pp.clusterEndpoints) > 0 && svc.UsesClusterEndpoints() {
		pp.clusterChain = pp.names.cluster
	}
	if len(pp.localEndpoints) > 0 && svc.UsesLocalEndpoints() {
		pp.localChain = pp.names.localChain()
	}
	pp.internalChain, pp.hasInternal = pp.clusterChain, pp.hasEndpoints
	if svc.InternalPolicyLocal() {
		pp.internalChain, pp.hasInternal = pp.localChain, len(pp.localEndpoints) > 0
	}
	pp.hasExternal = pp.hasEndpoints
	if svc.ExternalPolicyLocal() && len(pp.localEndpoints) == 0 {
		pp.hasExternal = false
	}
	pp.usesExternalChain = pp.hasEndpoints && svc.ExternallyAccessible()
	switch {
	case !pp.hasEndpoints:
		pp.internalVerdict = gotoVerdict(chainReject)
		pp.externalVerdict = gotoVerdict(chainReject)
	default:
		if !pp.hasInternal {
			pp.internalVerdict = verdict{kind: verdictDrop}
		}
		if !pp.hasExternal {
			pp.externalVerdict = verdict{kind: verdictDrop}
		}
	}

	p.planClusterIP(sp, pp)
	p.planExternalIPs(sp, pp)
	p.planLoadBalancer(sp, pp)
	p.planNodePort(sp, pp)
	p.planLocalhostNodePort(sp, pp)
	p.planLocalhostProxy(sp, pp)
	p.planExternalChain(sp, pp)
	p.planAffinitySets(sp, pp)
	p.planPolicyChains(sp, pp)
	p.planEndpointChains(sp, pp)
}

// svcComment is the comment upstream puts on no-endpoint elements.
// (cut to 128 bytes, as upstream v1.37 cuts it).
func svcComment(spn proxy.ServicePortName) string { return truncateComment(spn.String()) }

// key is addr's element key for the port (address . protocol . port).
func (pp *portPlan) key(addr netip.Addr) elemKey {
	return addrProtoPortKey(addr, pp.protoNum, pp.portNum)
}

// planAll plans every service of the update, keyed by service.
func (p *planner) planAll(ports map[types.NamespacedName][]proxy.ServicePortName, services map[proxy.ServicePortName]proxy.ServicePort,
	endpoints map[proxy.ServicePortName][]proxy.Endpoint) map[types.NamespacedName]*servicePlan {
	out := make(map[types.NamespacedName]*servicePlan, len(ports))
	for name, ps := range ports {
		if sp := p.planService(ps, services, endpoints); sp != nil {
			out[name] = sp
		}
	}
	return out
}

// sortedNames returns the keys of m in order (deterministic transactions).
func sortedNames[V any](m map[types.NamespacedName]V) []types.NamespacedName {
	out := make([]types.NamespacedName, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
