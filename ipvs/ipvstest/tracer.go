package ipvstest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TracerConfig describes the node a Tracer simulates.
type TracerConfig struct {
	// Family is the IP family of the proxier ("": the family of the Fakes).
	Family v1.IPFamily
	// PodInterface and ExternalInterface as in xtablestest.TracerConfig
	// (defaults "cbr0" and "eth0").
	PodInterface      string
	ExternalInterface string
	// MasqueradeBit is the proxier's KUBE-MARK-MASQ bit, read as in
	// ipvs.Config (0: 14; -1: bit 0).
	MasqueradeBit int
}

// Tracer answers where a packet goes under the state a Proxier programmed
// into the fakes: the iptables part (filter drops and rejects, masquerade
// marks) through xtablestest's tracer with -m set answered by the ipset
// fake; then, for a packet the rules let through to a local address, the
// IPVS virtual server for its destination: its real servers of weight > 0
// are the backends, persistence makes it Sticky, and a virtual server with
// none rejects (the kernel hands the packet to the local stack, where no
// socket listens). A real server that is the client itself is masqueraded
// when KUBE-LOOP-BACK says so (hairpin). It implements proxytest.Tracer.
type Tracer struct {
	cfg   TracerConfig
	f     *Fakes
	ipvs  *IPVS
	ipset *IPSet
	nl    *Netlink
	ipt   *xtablestest.Fake
}

var _ proxytest.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer over the fakes a Proxier drives. It reads
// their state at every Trace, so one Tracer serves a whole test.
func NewTracer(f *Fakes, cfg TracerConfig) *Tracer {
	if cfg.Family == "" {
		cfg.Family = f.family
	}
	if cfg.Family == "" {
		cfg.Family = v1.IPv4Protocol
	}
	if cfg.MasqueradeBit == -1 {
		cfg.MasqueradeBit = 0
	} else if cfg.MasqueradeBit == 0 {
		cfg.MasqueradeBit = engine.DefaultMasqueradeBit
	}
	return &Tracer{cfg: cfg, f: f, ipvs: f.IPVS, ipset: f.IPSet, nl: f.Netlink, ipt: f.IPTables}
}

// Dump renders the state the Tracer reads (Fakes.Dump); the conformance
// runner logs it when a check fails.
func (t *Tracer) Dump() string { return t.f.Dump() }

// Trace implements proxytest.Tracer.
func (t *Tracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	mark := uint32(1) << uint(t.cfg.MasqueradeBit)
	tr := xtablestest.NewTracer(t.ipt, xtablestest.TracerConfig{
		NodeIPs:           t.nl.AllAddresses(),
		PodInterface:      t.cfg.PodInterface,
		ExternalInterface: t.cfg.ExternalInterface,
		MasqueradeMark:    xtablestest.Mark{Value: mark, Mask: mark},
		IPSetMatch: func(q xtablestest.IPSetQuery) (bool, error) {
			return t.ipset.Match(q.Set, q.Protocol, q.Addrs, q.Ports)
		},
	})
	trace, err := tr.TraceAll(p)
	if err != nil {
		return proxytest.Result{}, fmt.Errorf("ipvstest: %w", err)
	}
	ipt, err := trace.Result()
	if err != nil {
		return proxytest.Result{}, fmt.Errorf("ipvstest: %w", err)
	}
	switch ipt.Verdict {
	case proxytest.Dropped, proxytest.Rejected:
		return proxytest.Result{Verdict: ipt.Verdict}, nil
	case proxytest.Forwarded:
		// the ipvs ruleset never DNATs; something else did
		return ipt, nil
	}
	proto := p.Protocol
	if proto == "" {
		proto = v1.ProtocolTCP
	}
	if p.Port < 1 || p.Port > 65535 || !t.nl.IsLocal(p.Dst) {
		return proxytest.Result{Verdict: proxytest.NotProxied}, nil
	}
	key := ipvs.VirtualServerKey{Address: p.Dst.Unmap(), Protocol: proto, Port: uint16(p.Port)}
	vs, rss, ok := t.ipvs.Lookup(key)
	if !ok {
		return proxytest.Result{Verdict: proxytest.NotProxied}, nil
	}
	// IPVS DNATs in LOCAL_IN and sends the packet out through POSTROUTING,
	// where KUBE-POSTROUTING masquerades what KUBE-MARK-MASQ marked; the
	// iptables trace ends at local delivery, so look for the mark rule.
	marked := ipt.Masquerade
	for _, path := range trace.Paths {
		for _, r := range path.Rules {
			if strings.HasPrefix(r, "nat "+string(ipvs.ChainMarkMasq)+": ") {
				marked = true
			}
		}
	}
	res := proxytest.Result{Masquerade: marked, Sticky: vs.Flags&ipvs.FlagPersistent != 0}
	loopBack := ipvs.SetName(t.cfg.Family, ipvs.SetLoopBack)
	for _, rs := range rss {
		if rs.Weight <= 0 {
			continue
		}
		res.Backends = append(res.Backends, rs.AddrPort())
		if rs.Address == p.Src.Unmap() && t.ipset.Has(loopBack, ipvs.Entry{IP: rs.Address, Protocol: proto, Port: rs.Port, IP2: rs.Address}) {
			res.Masquerade = true
		}
	}
	if len(res.Backends) == 0 {
		return proxytest.Result{Verdict: proxytest.Rejected}, nil
	}
	slices.SortFunc(res.Backends, func(a, b netip.AddrPort) int { return a.Compare(b) })
	res.Verdict = proxytest.Forwarded
	return res, nil
}
