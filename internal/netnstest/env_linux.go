//go:build linux

package netnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// NewEnv builds topo on the real kernel in fresh namespaces (see Env) and
// removes all of it, servers and namespaces, in t.Cleanup, also when the
// build fails half way. It skips t unless running as root on Linux.
func NewEnv(t testing.TB, topo proxytest.Topology) *Env {
	t.Helper()
	SkipUnlessRoot(t)
	removeStale()
	env := &Env{Topo: topo, Pods: map[string]*Namespace{}}
	var all []*Namespace
	t.Cleanup(func() {
		for _, s := range env.servers {
			s.close()
		}
		for i := len(all) - 1; i >= 0; i-- {
			if err := all[i].close(); err != nil {
				t.Errorf("netnstest: cleanup: %v", err)
			}
		}
	})
	newNS := func(role string) *Namespace {
		ns, err := newNamespace(role)
		if err != nil {
			t.Fatalf("%v", err)
		}
		all = append(all, ns)
		return ns
	}
	env.Node = newNS("node")
	env.World = newNS("world")
	env.External = newNS("ext1")
	env.External2 = newNS("ext2")
	for _, p := range topo.Pods() {
		if p.Name == WorldName {
			t.Fatalf("netnstest: pod name %q is reserved", p.Name)
		}
		env.Pods[p.Name] = newNS(p.Name)
	}
	if err := env.build(all); err != nil {
		t.Fatalf("netnstest: build topology: %v", err)
	}
	return env
}

func (e *Env) build(all []*Namespace) error {
	topo := e.Topo
	v6 := topo.Family == v1.IPv6Protocol
	for _, ns := range all {
		if err := baseSetup(ns, v6, ns == e.Node); err != nil {
			return err
		}
	}

	node, err := netlink.NewHandleAt(e.Node.handle)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", e.Node.Name, err)
	}
	defer node.Close()

	// Pods: /32 (/128) each way, default route via the node's gateway address.
	for _, p := range topo.Pods() {
		err := e.connect(node, e.Pods[p.Name], p.HostInterface,
			topo.PodGateway, p.IP)
		if err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	// External clients and the world: the node's side carries the node IP.
	for _, x := range []struct {
		ns   *Namespace
		link string
		ip   netip.Addr
	}{
		{e.External, topo.UplinkInterface, topo.ExternalClient},
		{e.External2, topo.Uplink2Interface, topo.ExternalClient2},
		{e.World, topo.WorldInterface, topo.World},
	} {
		if err := e.connect(node, x.ns, x.link, topo.NodeIP, x.ip); err != nil {
			return fmt.Errorf("%s: %w", x.ns.Role, err)
		}
	}
	// The node's default route leads to the world, from the node IP.
	wl, err := node.LinkByName(topo.WorldInterface)
	if err != nil {
		return err
	}
	if err := node.RouteAdd(&netlink.Route{
		LinkIndex: wl.Attrs().Index, Dst: anyNet(v6), Gw: ipOf(topo.World), Src: ipOf(topo.NodeIP),
		Flags: int(netlink.FLAG_ONLINK),
	}); err != nil {
		return fmt.Errorf("node default route: %w", err)
	}
	// The world owns the service, external-IP and load-balancer ranges.
	world, err := netlink.NewHandleAt(e.World.handle)
	if err != nil {
		return err
	}
	defer world.Close()
	lo, err := world.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, pfx := range []netip.Prefix{topo.ServiceCIDR, topo.ExternalIPRange, topo.LoadBalancerRange} {
		if err := world.RouteAdd(&netlink.Route{
			LinkIndex: lo.Attrs().Index, Dst: ipNet(pfx.Masked()), Type: unix.RTN_LOCAL,
			Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST,
		}); err != nil {
			return fmt.Errorf("world local route %s: %w", pfx, err)
		}
	}

	// A veth only carries traffic once the kernel's link watcher has
	// seen both ends up, which it may do up to a second later.
	if err := e.waitOperUp(all); err != nil {
		return err
	}

	// Servers.
	for _, p := range topo.Pods() {
		s, err := startServers(e.Pods[p.Name], p.Name, topo.Family, topo.ServerPorts)
		if err != nil {
			return err
		}
		e.servers = append(e.servers, s)
	}
	s, err := startServers(e.World, WorldName, topo.Family, topo.ServerPorts)
	if err != nil {
		return err
	}
	e.servers = append(e.servers, s)
	return nil
}

// baseSetup sets a namespace's sysctls and brings up lo.
func baseSetup(ns *Namespace, v6, isNode bool) error {
	type sc struct{ path, value string }
	var list []sc
	// No duplicate address detection: addresses are usable at once.
	list = append(list, sc{"net/ipv6/conf/all/accept_dad", "0"}, sc{"net/ipv6/conf/default/accept_dad", "0"},
		sc{"net/ipv6/conf/default/accept_ra", "0"})
	if ns.Role == "world" {
		// The world replies to UDP from whatever address was asked (AnyIP
		// routes); IPv6 needs non-local source addresses allowed for that.
		list = append(list, sc{"net/ipv6/ip_nonlocal_bind", "1"})
	}
	if isNode {
		list = append(list,
			sc{"net/ipv4/ip_forward", "1"},
			sc{"net/ipv4/conf/all/route_localnet", "1"},
			sc{"net/ipv4/conf/all/rp_filter", "0"}, sc{"net/ipv4/conf/default/rp_filter", "0"},
			sc{"net/ipv4/conf/all/send_redirects", "0"}, sc{"net/ipv4/conf/default/send_redirects", "0"},
			sc{"net/ipv6/conf/all/forwarding", "1"},
			// ICMP errors (REJECT) must not be rate limited per destination,
			// or a probe's second attempt would look like a drop.
			sc{"net/ipv4/icmp_ratelimit", "0"}, sc{"net/ipv6/icmp/ratelimit", "0"},
		)
	} else {
		list = append(list,
			sc{"net/ipv4/conf/all/accept_redirects", "0"}, sc{"net/ipv4/conf/default/accept_redirects", "0"},
			sc{"net/ipv6/conf/all/accept_redirects", "0"}, sc{"net/ipv6/conf/default/accept_redirects", "0"},
		)
	}
	for _, s := range list {
		err := writeSysctl(ns, s.path, s.value)
		if err != nil && !v6 && errors.Is(err, os.ErrNotExist) {
			continue // an IPv4 topology does not need IPv6 knobs
		}
		if err != nil {
			return err
		}
	}
	h, err := netlink.NewHandleAt(ns.handle)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", ns.Name, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

// connect creates a veth from the node (hostIf, carrying hostIP) to peer
// ("eth0", carrying peerIP), with a host route each way and the peer's
// default route via hostIP.
func (e *Env) connect(node *netlink.Handle, peer *Namespace, hostIf string, hostIP, peerIP netip.Addr) error {
	v6 := e.Topo.Family == v1.IPv6Protocol
	if err := node.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostIf},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(peer.handle)),
	}); err != nil {
		return fmt.Errorf("veth %s: %w", hostIf, err)
	}
	ph, err := netlink.NewHandleAt(peer.handle)
	if err != nil {
		return err
	}
	defer ph.Close()
	for _, side := range []struct {
		h         *netlink.Handle
		link      string
		own, peer netip.Addr
		dflt      bool
	}{
		{node, hostIf, hostIP, peerIP, false},
		{ph, "eth0", peerIP, hostIP, true},
	} {
		l, err := side.h.LinkByName(side.link)
		if err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: ipNet(proxytest.HostPrefix(side.own))}
		if v6 {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := side.h.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("address %s on %s: %w", side.own, side.link, err)
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return err
		}
		if err := side.h.RouteAdd(&netlink.Route{
			LinkIndex: l.Attrs().Index, Dst: ipNet(proxytest.HostPrefix(side.peer)), Scope: netlink.SCOPE_LINK,
		}); err != nil {
			return fmt.Errorf("route %s dev %s: %w", side.peer, side.link, err)
		}
		if side.dflt {
			if err := side.h.RouteAdd(&netlink.Route{
				LinkIndex: l.Attrs().Index, Dst: anyNet(v6), Gw: ipOf(side.peer), Flags: int(netlink.FLAG_ONLINK),
			}); err != nil {
				return fmt.Errorf("default route via %s: %w", side.peer, err)
			}
		}
	}
	return nil
}

func ipOf(a netip.Addr) net.IP { return net.IP(a.AsSlice()) }

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: ipOf(p.Addr()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func anyNet(v6 bool) *net.IPNet {
	if v6 {
		return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
}

// waitOperUp waits (bounded) until every veth in every namespace is
// operationally up.
func (e *Env) waitOperUp(all []*Namespace) error {
	deadline := time.Now().Add(10 * time.Second)
	for _, ns := range all {
		h, err := netlink.NewHandleAt(ns.handle)
		if err != nil {
			return err
		}
		for {
			links, err := h.LinkList()
			if err != nil {
				h.Close()
				return err
			}
			var down []string
			for _, l := range links {
				if l.Type() == "veth" && l.Attrs().OperState != netlink.OperUp {
					down = append(down, l.Attrs().Name)
				}
			}
			if len(down) == 0 {
				break
			}
			if time.Now().After(deadline) {
				h.Close()
				return fmt.Errorf("links %v in %s not up after 10s", down, ns.Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
		h.Close()
	}
	return nil
}
