package main

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// readNodeView reads the node's addresses and main-table routes (of
// both families: the addresses of either make a packet local) and
// route_localnet, from the calling thread's network namespace.
func readNodeView(v6 bool) (*nodeView, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	n := &nodeView{RouteLocalnet: readRouteLocalnet()}
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, l := range links {
		attrs := l.Attrs()
		names[attrs.Index] = attrs.Name
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip.IsLoopback() {
				continue
			}
			n.Addrs = append(n.Addrs, ip)
			if attrs.Name == "kube-ipvs0" {
				n.IPVSAddrs = append(n.IPVSAddrs, ip)
			}
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		name := names[r.LinkIndex]
		if name == "" || r.Type != unix.RTN_UNICAST {
			continue
		}
		if r.Dst == nil {
			if r.Family == unix.AF_INET6 {
				if n.DefaultInterface6 == "" {
					n.DefaultInterface6 = name
				}
			} else if n.DefaultInterface4 == "" {
				n.DefaultInterface4 = name
			}
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		pfx := netip.PrefixFrom(ip.Unmap(), ones)
		if pfx.Bits() == 0 {
			if pfx.Addr().Is6() && n.DefaultInterface6 == "" {
				n.DefaultInterface6 = name
			} else if pfx.Addr().Is4() && n.DefaultInterface4 == "" {
				n.DefaultInterface4 = name
			}
			continue
		}
		n.Routes = append(n.Routes, nodeRoute{Prefix: pfx.Masked(), Interface: name})
	}
	return n, nil
}
