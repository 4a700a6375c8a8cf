package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// ipvsLister is the read-only part of the IPVS interface a trace uses.
type ipvsLister interface {
	GetVirtualServers() ([]*ipvs.VirtualServer, error)
	GetRealServers(vs *ipvs.VirtualServer) ([]*ipvs.RealServer, error)
}

// ipvsSources are the node's IPVS table, ipsets and kube-ipvs0 addresses,
// read through netlink, and its iptables rules as saved.
type ipvsSources struct {
	IPVS  ipvsLister
	IPSet interface {
		ListSets() ([]ipvs.Set, error)
		ListEntries(set string) ([]ipvs.Entry, error)
	}
	Netlink interface {
		ListBindAddresses(dev string) ([]netip.Addr, error)
	}
	Saved string
}

// traceIPVS reads the node's IPVS state (netlink: the virtual and real
// servers, the KUBE- ipsets, the addresses of kube-ipvs0) and its
// iptables rules (iptables-save), loads them into ipvstest's fakes and
// traces p with ipvstest's tracer.
func traceIPVS(ctx context.Context, backend string, p proxytest.Packet, node *nodeView, run toolRunner) (*traceReport, error) {
	src, closeIPVS, err := openIPVSSources()
	if err != nil {
		return nil, err
	}
	defer closeIPVS()
	saved, used, cmd, notes, err := readIPTables(ctx, backend, p.Dst.Is6(), run)
	if err != nil {
		return nil, err
	}
	src.Saved = saved
	rep, err := traceIPVSSources(src, p, node)
	if err != nil {
		return nil, err
	}
	rep.Dataplane = "ipvs (iptables " + used + " backend)"
	rep.Read = []string{"IPVS, ipset and kube-ipvs0 over netlink", cmd}
	rep.Notes = append(notes, rep.Notes...)
	return rep, nil
}

// openIPVSSources opens the node's IPVS table, ipsets and kube-ipvs0
// addresses over netlink, read-only, for trace and diff (Saved is left
// to the caller); closeIPVS releases them. Not ipvskernel.NewInterfaces:
// that also builds an iptables runner (an exec of iptables --version),
// which a read that takes its rules from iptables-save does not use.
func openIPVSSources() (src ipvsSources, closeIPVS func(), err error) {
	vs, err := ipvskernel.New(ipvskernel.Options{})
	if err != nil {
		return ipvsSources{}, nil, fmt.Errorf("cannot read IPVS over netlink (is ip_vs loaded?): %w", err)
	}
	sets, err := ipvskernel.NewIPSet(ipvskernel.Options{})
	if err != nil {
		_ = vs.Close()
		return ipvsSources{}, nil, fmt.Errorf("cannot read the ipsets over netlink: %w", err)
	}
	nl, err := ipvskernel.NewNetlink(ipvskernel.Options{})
	if err != nil {
		_ = vs.Close()
		return ipvsSources{}, nil, fmt.Errorf("cannot read the addresses over netlink: %w", err)
	}
	return ipvsSources{IPVS: vs, IPSet: sets, Netlink: nl}, func() { _ = vs.Close() }, nil
}

// loadIPVSFakes copies the sources into ipvstest's fakes: every virtual
// server with its real servers, every KUBE- set with its entries, the
// kube-ipvs0 addresses and the node's (node.Addrs, on a link of their
// own), the iptables rules.
func loadIPVSFakes(src ipvsSources, family v1.IPFamily, node *nodeView) (*ipvstest.Fakes, error) {
	f := ipvstest.NewFakes(family)
	vss, err := src.IPVS.GetVirtualServers()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS virtual servers: %w", err)
	}
	for _, vs := range vss {
		if vs.Address.Is6() != (family == v1.IPv6Protocol) {
			continue
		}
		rss, err := src.IPVS.GetRealServers(vs)
		if err != nil {
			return nil, fmt.Errorf("listing the real servers of %s: %w", vs.Address, err)
		}
		if err := f.IPVS.AddVirtualServer(vs); err != nil {
			return nil, err
		}
		for _, rs := range rss {
			if err := f.IPVS.AddRealServer(vs, rs); err != nil {
				return nil, err
			}
		}
	}
	sets, err := src.IPSet.ListSets()
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	for _, s := range sets {
		if !strings.HasPrefix(s.Name, "KUBE-") {
			continue
		}
		entries, err := src.IPSet.ListEntries(s.Name)
		if err != nil {
			return nil, fmt.Errorf("listing ipset %s: %w", s.Name, err)
		}
		if err := f.IPSet.CreateSet(s); err != nil {
			return nil, err
		}
		for _, e := range entries {
			if err := f.IPSet.AddEntry(s.Name, e); err != nil {
				return nil, err
			}
		}
	}
	bound, err := src.Netlink.ListBindAddresses(ipvs.DummyDevice)
	if err != nil && !errors.Is(err, ipvs.ErrNotFound) {
		return nil, fmt.Errorf("listing the addresses of %s: %w", ipvs.DummyDevice, err)
	}
	f.Netlink.AddLink(ipvs.DummyDevice, bound...)
	var own []netip.Addr
	for _, a := range node.Addrs {
		if !containsAddr(bound, a) {
			own = append(own, a)
		}
	}
	f.Netlink.AddLink("node", own...)
	ipt, err := iptablestest.NewFakeFromDump(family, src.Saved)
	if err != nil {
		return nil, fmt.Errorf("loading the iptables rules into svcproxy's fake: %w", err)
	}
	f.IPTables = ipt
	return f, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b == a {
			return true
		}
	}
	return false
}

// traceIPVSSources loads the sources and traces p: the verdict and
// backends from ipvstest's tracer, the iptables part of the way (marks,
// drops, rejects) from iptablestest's, and the IPVS virtual server and
// real servers that decided it.
func traceIPVSSources(src ipvsSources, p proxytest.Packet, node *nodeView) (*traceReport, error) {
	family := v1.IPv4Protocol
	if p.Dst.Is6() {
		family = v1.IPv6Protocol
	}
	f, err := loadIPVSFakes(src, family, node)
	if err != nil {
		return nil, err
	}
	cfg := ipvstest.TracerConfig{ExternalInterface: node.defaultInterface(p.Dst.Is6())}
	if p.Origin != proxytest.FromNode {
		if in := node.interfaceFor(p.Src); in != "" {
			cfg.PodInterface = in
			if p.Origin == proxytest.FromExternal {
				cfg.ExternalInterface = in
			}
		}
	}
	res, err := ipvstest.NewTracer(f, cfg).Trace(p)
	if err != nil {
		if errors.Is(err, iptablestest.ErrUnsupported) {
			return nil, fmt.Errorf("a rule on this packet's way is one svcproxy's tracer does not model (a foreign rule?), so it cannot say what happens: %w", err)
		}
		return nil, err
	}
	rep := &traceReport{Dataplane: "ipvs", Packet: newPacketReport(p)}
	rep.fillResult(res)

	// The iptables part of the way, for the steps.
	var steps []string
	ipsets := func(q iptablestest.IPSetQuery) (bool, error) {
		return f.IPSet.Match(q.Set, q.Protocol, q.Addrs, q.Ports)
	}
	// Service addresses on kube-ipvs0 are local: IPVS takes the packet
	// on its way in.
	local := *node
	local.Addrs = append(slices.Clone(node.Addrs), f.Netlink.AllAddresses()...)
	if ipt, err := traceIPTablesDump(f.IPTables.Dump(), p, &local, ipsets); err == nil && len(ipt.Paths) > 0 {
		steps = ipt.Paths[0].Steps
	}
	proto := p.Protocol
	if proto == "" {
		proto = v1.ProtocolTCP
	}
	vs, rss, ok := f.IPVS.Lookup(ipvs.VirtualServerKey{Address: p.Dst, Protocol: proto, Port: uint16(p.Port)})
	if ok && res.Verdict != proxytest.NotProxied {
		head := fmt.Sprintf("ipvs: virtual server %s %s scheduler %s", proxy.LowerProtocol(vs.Protocol), netip.AddrPortFrom(vs.Address, vs.Port), vs.Scheduler)
		if vs.Flags&ipvs.FlagPersistent != 0 {
			head += fmt.Sprintf(" persistent %ds", vs.Timeout)
		}
		steps = append(steps, head)
		total := 0
		for _, rs := range rss {
			if rs.Weight > 0 {
				total += rs.Weight
			}
		}
		weighted := vs.Scheduler == "" || vs.Scheduler == "rr" || vs.Scheduler == "wrr"
		for _, rs := range rss {
			steps = append(steps, fmt.Sprintf("ipvs:   -> real server %s weight %d", rs.AddrPort(), rs.Weight))
			if rs.Weight <= 0 || total == 0 {
				continue
			}
			for i := range rep.Reach {
				if rep.Reach[i].Backend == rs.AddrPort().String() && weighted {
					rep.Reach[i].Probability = formatProbability(float64(rs.Weight) / float64(total))
				}
			}
		}
		if !weighted {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the %s scheduler picks by the real servers' load: no fixed probabilities", vs.Scheduler))
		}
	}
	path := pathReport{Verdict: rep.Result, Masquerade: res.Masquerade, Sticky: res.Sticky, Services: servicesOf(steps), Steps: steps}
	rep.Paths = []pathReport{path}
	rep.Notes = append(rep.Notes, "IPVS keeps no Service names: the virtual server is the Service's address and port")
	return rep, nil
}

// hasIPVSInterface reports whether the ipvs mode's dummy interface, which
// holds the services' addresses, is there.
func hasIPVSInterface() bool {
	_, err := net.InterfaceByName("kube-ipvs0")
	return err == nil
}

// hasIPVSServices reports whether the namespace's IPVS table has a
// virtual server: the ipvs mode's dataplane. It reads /proc/net/ip_vs,
// which exists only once ip_vs is loaded, so detecting never loads it.
func hasIPVSServices() bool {
	// thread-self: the calling thread's namespace (tests enter one on a
	// locked thread); /proc/net would be the process's.
	b, err := os.ReadFile("/proc/thread-self/net/ip_vs")
	if err != nil {
		if b, err = os.ReadFile("/proc/net/ip_vs"); err != nil {
			return false
		}
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && (f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP") {
			return true
		}
	}
	return false
}
