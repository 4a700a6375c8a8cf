package winkerneltest

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/winkernel"
)

var featureNames = []struct {
	name string
	get  func(*winkernel.Features) *bool
}{
	{"dsr", func(f *winkernel.Features) *bool { return &f.DSR }},
	{"session-affinity", func(f *winkernel.Features) *bool { return &f.SessionAffinity }},
	{"ipv6-dual-stack", func(f *winkernel.Features) *bool { return &f.IPv6DualStack }},
	{"modify-load-balancer", func(f *winkernel.Features) *bool { return &f.ModifyLoadBalancer }},
	{"remote-subnet", func(f *winkernel.Features) *bool { return &f.RemoteSubnet }},
}

func featuresString(f winkernel.Features) string {
	var parts []string
	for _, n := range featureNames {
		if *n.get(&f) {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

func parseFeatures(s string) (winkernel.Features, error) {
	var f winkernel.Features
	if s == "none" {
		return f, nil
	}
	for _, part := range strings.Split(s, ",") {
		found := false
		for _, n := range featureNames {
			if n.name == part {
				*n.get(&f), found = true, true
			}
		}
		if !found {
			return f, fmt.Errorf("unknown feature %q", part)
		}
	}
	return f, nil
}

func parseFlags(s string) (winkernel.LBFlags, error) {
	if s == "none" {
		return 0, nil
	}
	var flags winkernel.LBFlags
	for _, part := range strings.Split(s, ",") {
		found := false
		for bit := winkernel.LBFlags(1); bit != 0 && bit <= winkernel.FlagVipExternalIP; bit <<= 1 {
			if bit.String() == part {
				flags |= bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown flag %q", part)
		}
	}
	return flags, nil
}

func parseProtocol(s string) (uint16, error) {
	switch s {
	case "tcp":
		return winkernel.ProtocolTCP, nil
	case "udp":
		return winkernel.ProtocolUDP, nil
	case "sctp":
		return winkernel.ProtocolSCTP, nil
	}
	if n, ok := strings.CutPrefix(s, "proto-"); ok {
		v, err := strconv.ParseUint(n, 10, 16)
		return uint16(v), err
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// ParseDump replaces the fake's state by the one dump describes, in the
// form Dump writes, so that Dump of the result is dump again (a
// round trip); lines starting with "#" and blank lines are skipped. IDs
// are made up; what Dump leaves out takes its default (see Dump): a
// network's features and version NewFakes', an endpoint's network the
// first one, a remote endpoint's name the engine's. LB backends are
// endpoints named by address (the first endpoint with that address), or
// an ID that names no endpoint ("ep-9(missing)"). Calls are not counted
// and nothing is checked the way the HNS methods check (a dump may hold
// what HNS refuses, as one left by another program); a line that does not
// parse is an error naming it, and the fake is then left empty.
func (f *FakeHNS) ParseDump(dump string) (err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.networks = map[string]*winkernel.Network{}
	f.endpoints = map[string]winkernel.Endpoint{}
	f.lbs = map[string]winkernel.LoadBalancer{}
	f.keys = map[winkernel.LBKey][]string{}
	f.byIP = map[netKey]string{}
	f.nextID, f.leaks = 0, 0
	defer func() {
		if err != nil {
			f.networks = map[string]*winkernel.Network{}
			f.endpoints = map[string]winkernel.Endpoint{}
			f.lbs = map[string]winkernel.LoadBalancer{}
			f.keys = map[winkernel.LBKey][]string{}
			f.byIP = map[netKey]string{}
		}
	}()

	var first string                 // the first network's ID
	byName := map[string]string{}    // network name -> ID
	addrs := map[netip.Addr]string{} // the first endpoint with each address
	sc := lines.New([]byte(dump))
	for lineNo := 1; sc.Scan(); lineNo++ {
		line := strings.TrimSpace(string(sc.Line()))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("winkerneltest: dump line %d %q: %s", lineNo, line, fmt.Sprintf(format, args...))
		}
		fields := strings.Fields(line)
		switch fields[0] {
		case "network":
			if len(fields) < 3 {
				return fail("want network NAME TYPE ...")
			}
			n := &winkernel.Network{ID: f.newID("net"), Name: fields[1], Type: winkernel.NetworkType(fields[2]),
				Features: defaultFeatures, Version: defaultVersion}
			for i := 3; i < len(fields); i++ {
				switch tok := fields[i]; {
				case tok == "remote":
					if i+3 >= len(fields) || fields[i+2] != "via" {
						return fail("want remote PREFIX via ADDRESS")
					}
					prefix, err := netip.ParsePrefix(fields[i+1])
					if err != nil {
						return fail("%v", err)
					}
					pa, err := netip.ParseAddr(fields[i+3])
					if err != nil {
						return fail("%v", err)
					}
					n.RemoteSubnets = append(n.RemoteSubnets, winkernel.RemoteSubnet{DestinationPrefix: prefix, ProviderAddress: pa})
					i += 3
				case strings.HasPrefix(tok, "features="):
					feats, err := parseFeatures(strings.TrimPrefix(tok, "features="))
					if err != nil {
						return fail("%v", err)
					}
					n.Features = feats
				case strings.HasPrefix(tok, "version="):
					major, minor, ok := strings.Cut(strings.TrimPrefix(tok, "version="), ".")
					a, err1 := strconv.Atoi(major)
					b, err2 := strconv.Atoi(minor)
					if !ok || err1 != nil || err2 != nil {
						return fail("bad version %q", tok)
					}
					n.Version = winkernel.Version{Major: a, Minor: b}
				default:
					return fail("unknown field %q", tok)
				}
			}
			if _, dup := byName[n.Name]; dup {
				return fail("network %s twice", n.Name)
			}
			byName[n.Name] = n.ID
			if first == "" {
				first = n.ID
			}
			f.networks[n.ID] = n

		case "endpoint":
			if len(fields) < 3 || (fields[2] != "local" && fields[2] != "remote") {
				return fail("want endpoint ADDRESS local|remote ...")
			}
			ip, err := netip.ParseAddr(fields[1])
			if err != nil {
				return fail("%v", err)
			}
			ep := winkernel.Endpoint{IP: ip, NetworkID: first, Remote: fields[2] == "remote"}
			if ep.Remote {
				ep.Name = winkernel.RemoteEndpointNamePrefix + ip.String()
			} else {
				ep.MAC = "00-15-5d-00-00-00" // as AddLocalEndpoint
			}
			for _, tok := range fields[3:] {
				key, val, ok := strings.Cut(tok, "=")
				if !ok {
					return fail("unknown field %q", tok)
				}
				switch key {
				case "name":
					ep.Name = val
				case "mac":
					ep.MAC = val
				case "pa":
					if ep.ProviderAddress, err = netip.ParseAddr(val); err != nil {
						return fail("%v", err)
					}
				case "net":
					id, ok := byName[val]
					if !ok {
						return fail("no network %q above", val)
					}
					ep.NetworkID = id
				case "net-id":
					ep.NetworkID = val
				default:
					return fail("unknown field %q", tok)
				}
			}
			if ep.NetworkID == "" {
				return fail("no network line above")
			}
			ep.ID = f.newID("ep")
			f.putEndpoint(ep)
			if _, seen := addrs[ep.IP]; !seen {
				addrs[ep.IP] = ep.ID
			}

		case "lb":
			lb, err := parseLB(line, addrs)
			if err != nil {
				return fail("%v", err)
			}
			lb.ID = f.newID("lb")
			f.putLB(lb)

		default:
			return fail("unknown line")
		}
	}
	return nil
}

// parseLB reads "lb KEY [vips=[A B]] -> BACKENDS src=S flags=F dist=D".
func parseLB(line string, byIP map[netip.Addr]string) (winkernel.LoadBalancer, error) {
	var lb winkernel.LoadBalancer
	head, tail, ok := strings.Cut(strings.TrimPrefix(line, "lb "), " ->")
	if !ok {
		return lb, fmt.Errorf("no ->")
	}
	key, vips, _ := strings.Cut(strings.TrimSpace(head), " ")
	addrPort, protoName, ok := cutLast(key, "/")
	if !ok {
		return lb, fmt.Errorf("key %q: want ADDRESS:PORT/PROTOCOL", key)
	}
	proto, err := parseProtocol(protoName)
	if err != nil {
		return lb, err
	}
	lb.Protocol = proto
	if port, ok := strings.CutPrefix(addrPort, "*:"); ok {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return lb, fmt.Errorf("key %q: %v", key, err)
		}
		lb.ExternalPort = uint16(p)
	} else {
		ap, err := netip.ParseAddrPort(addrPort)
		if err != nil {
			return lb, fmt.Errorf("key %q: %v", key, err)
		}
		lb.FrontendVIPs, lb.ExternalPort = []netip.Addr{ap.Addr()}, ap.Port()
	}
	if vips = strings.TrimSpace(vips); vips != "" {
		list, ok := strings.CutPrefix(vips, "vips=[")
		list, ok2 := strings.CutSuffix(list, "]")
		if !ok || !ok2 {
			return lb, fmt.Errorf("unknown field %q", vips)
		}
		lb.FrontendVIPs = nil
		for _, s := range strings.Fields(list) {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return lb, err
			}
			lb.FrontendVIPs = append(lb.FrontendVIPs, a)
		}
	}
	portSet := false
	for _, tok := range strings.Fields(tail) {
		switch {
		case strings.HasPrefix(tok, "src="):
			if v := strings.TrimPrefix(tok, "src="); v != "none" {
				if lb.SourceVIP, err = netip.ParseAddr(v); err != nil {
					return lb, err
				}
			}
		case strings.HasPrefix(tok, "flags="):
			if lb.Flags, err = parseFlags(strings.TrimPrefix(tok, "flags=")); err != nil {
				return lb, err
			}
		case strings.HasPrefix(tok, "dist="):
			switch v := strings.TrimPrefix(tok, "dist="); v {
			case "none":
				lb.Distribution = winkernel.DistributionNone
			case "source-ip":
				lb.Distribution = winkernel.DistributionSourceIP
			default:
				n, err := strconv.ParseUint(v, 10, 32)
				if err != nil {
					return lb, fmt.Errorf("distribution %q", v)
				}
				lb.Distribution = winkernel.Distribution(n)
			}
		case strings.HasSuffix(tok, "(missing)"):
			lb.EndpointIDs = append(lb.EndpointIDs, strings.TrimSuffix(tok, "(missing)"))
		default:
			ap, err := netip.ParseAddrPort(tok)
			if err != nil {
				return lb, fmt.Errorf("backend %q: %v", tok, err)
			}
			id, ok := byIP[ap.Addr()]
			if !ok {
				return lb, fmt.Errorf("backend %s: no endpoint line with that address above", tok)
			}
			if portSet && ap.Port() != lb.InternalPort {
				return lb, fmt.Errorf("backend %s: an LB has one internal port, %d", tok, lb.InternalPort)
			}
			lb.InternalPort, portSet = ap.Port(), true
			lb.EndpointIDs = append(lb.EndpointIDs, id)
		}
	}
	return lb, nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
