package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// traceWinkernel is trace in the kernelspace mode: the HNS state from a
// dump (winkerneltest's FakeHNS.Dump text) or, on Windows, listed from
// the node's HNS (the network named by --network-name or KUBE_NETWORK,
// its endpoints, every load balancer), loaded into winkerneltest's fake
// and traced with its tracer.
func traceWinkernel(o *traceOptions, p proxytest.Packet) (*traceReport, error) {
	family := v1.IPv4Protocol
	if p.Dst.Is6() {
		family = v1.IPv6Protocol
	}
	var f *winkerneltest.Fakes
	var read string
	var notes []string
	if o.fromDump != "" {
		b, err := os.ReadFile(o.fromDump)
		if err != nil {
			return nil, err
		}
		if f, err = winkerneltest.NewFakesFromDump(family, string(b)); err != nil {
			return nil, fmt.Errorf("loading the HNS dump: %w", err)
		}
		read = o.fromDump
	} else {
		network := o.network
		if network == "" {
			network = os.Getenv("KUBE_NETWORK")
		}
		if network == "" {
			return nil, fmt.Errorf("trace: the kernelspace mode needs the HNS network: give --network-name or set KUBE_NETWORK (or trace a dump with --from-dump)")
		}
		hns, err := winkernel.NewHNS()
		if err != nil {
			return nil, fmt.Errorf("cannot read HNS (it is on Windows only; on another system trace a dump with --from-dump): %w", err)
		}
		// The one listing of the HNS state (winkernel.ListState), copied
		// into the fake the tracer reads.
		if f, notes, err = winkerneltest.NewFakesFromHNS(family, hns, network); err != nil {
			return nil, err
		}
		read = "HNS (network " + network + ", its endpoints, every load balancer)"
	}
	nodeIPs := o.nodeIPs
	if len(nodeIPs) == 0 {
		nodeIPs = hostAddresses()
	}
	rep, err := traceHNS(f, o, p, nodeIPs)
	if err != nil {
		return nil, err
	}
	rep.Read = []string{read}
	rep.Notes = append(notes, rep.Notes...)
	return rep, nil
}

// hostAddresses are this host's addresses, loopback aside.
func hostAddresses() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && !pfx.Addr().IsLoopback() {
			out = append(out, pfx.Addr().Unmap())
		}
	}
	return out
}

// traceHNS traces p over the fake HNS: the packet's origin from
// --origin, else the node's addresses (node), the network's local
// endpoints (pod) or neither (external); the verdict and backends from
// winkerneltest's tracer; the load balancer and its endpoints as steps.
func traceHNS(f *winkerneltest.Fakes, o *traceOptions, p proxytest.Packet, nodeIPs []netip.Addr) (*traceReport, error) {
	var local []netip.Addr
	for _, ep := range f.HNS.Endpoints() {
		if !ep.Remote {
			local = append(local, ep.IP)
		}
	}
	if !p.Src.IsValid() {
		for _, a := range nodeIPs {
			if a.Is6() == p.Dst.Is6() {
				p.Src = a
				break
			}
		}
		if !p.Src.IsValid() {
			return nil, fmt.Errorf("trace: no node address of %s's family to send from: give --from or --node-ip", p.Dst)
		}
	}
	if origin, ok := flagOrigin(o.origin); ok {
		p.Origin = origin
	} else {
		switch {
		case slices.Contains(nodeIPs, p.Src) || p.Src.IsLoopback():
			p.Origin = proxytest.FromNode
		case slices.Contains(local, p.Src):
			p.Origin = proxytest.FromPod
		default:
			p.Origin = proxytest.FromExternal
		}
	}
	res, err := winkerneltest.NewTracer(f, winkerneltest.TracerConfig{NodeIPs: nodeIPs}).Trace(p)
	if err != nil {
		return nil, err
	}
	rep := &traceReport{Dataplane: "kernelspace (HNS)", Packet: newPacketReport(p)}
	rep.fillResult(res)
	var steps []string
	if res.Verdict == proxytest.Forwarded {
		if lb, ok := matchingLB(f, p, nodeIPs); ok {
			byID := map[string]winkernel.Endpoint{}
			for _, ep := range f.HNS.Endpoints() {
				byID[ep.ID] = ep
			}
			src := "none"
			if lb.SourceVIP.IsValid() {
				src = lb.SourceVIP.String()
			}
			dist := "none"
			if lb.Distribution == winkernel.DistributionSourceIP {
				dist = "source-ip"
			}
			steps = append(steps, fmt.Sprintf("hns: load balancer %s source VIP %s flags %s distribution %s", lb.Key(), src, lb.Flags, dist))
			for _, id := range lb.EndpointIDs {
				ep := byID[id]
				where := "local"
				if ep.Remote {
					where = "remote"
					if ep.ProviderAddress.IsValid() {
						where += " via " + ep.ProviderAddress.String()
					}
				}
				name := ""
				if ep.Name != "" {
					name = " " + ep.Name
				}
				steps = append(steps, fmt.Sprintf("hns:   -> endpoint %s (%s%s)", netip.AddrPortFrom(ep.IP, lb.InternalPort), where, name))
			}
		}
		if n := len(rep.Reach); n > 0 {
			for i := range rep.Reach {
				rep.Reach[i].Probability = formatProbability(1 / float64(n))
			}
			rep.Notes = append(rep.Notes, "HNS spreads new connections over a load balancer's endpoints by a hash of the connection: evenly in the long run")
		}
	}
	rep.Paths = []pathReport{{Verdict: rep.Result, Masquerade: res.Masquerade, Sticky: res.Sticky, Steps: steps}}
	rep.Notes = append(rep.Notes, "HNS keeps no Service names: the load balancer is the Service's address and port")
	return rep, nil
}

// matchingLB is the load balancer winkerneltest's tracer matches p with.
func matchingLB(f *winkerneltest.Fakes, p proxytest.Packet, nodeIPs []netip.Addr) (winkernel.LoadBalancer, bool) {
	proto := uint16(winkernel.ProtocolTCP)
	switch p.Protocol {
	case v1.ProtocolUDP:
		proto = winkernel.ProtocolUDP
	case v1.ProtocolSCTP:
		proto = winkernel.ProtocolSCTP
	}
	var found winkernel.LoadBalancer
	ok := false
	for _, lb := range f.HNS.LoadBalancers() {
		if lb.Protocol != proto || int(lb.ExternalPort) != p.Port {
			continue
		}
		vips := lb.FrontendVIPs
		if (len(vips) == 0 && slices.Contains(nodeIPs, p.Dst)) || slices.Contains(vips, p.Dst) {
			found, ok = lb, true
		}
	}
	return found, ok
}
