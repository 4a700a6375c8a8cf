package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// upstreamIPVSStateDir is the ipvs package's stored state of upstream
// kube-proxy v1.37.2's ipvs proxier for every step of the conformance
// table (IPv4): IPVS table, kube-ipvs0 addresses, ipsets, iptables rules.
const upstreamIPVSStateDir = "../../ipvs/testdata/upstream-v1.37.2"

// TestTraceIPVSUpstream: for every step of the conformance table (IPv4),
// upstream kube-proxy v1.37.2's ipvs state (as stored for the ipvs
// package's TestStateMatchesUpstream) is loaded as trace loads a node's,
// and trace over it answers every check as trace over the ipvs engine's
// own state for the same step does: the mode's layouts are the same, but
// for the steps where upstream's local-policy fallback (kubernetes#97081)
// fills a virtual server the engine leaves empty, where the two answers
// may differ on the checks that reach that virtual server (upstream
// forwards to the remote endpoints, the engine does not).
func TestTraceIPVSUpstream(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	node := topologyNodeView(topo)
	total, differed := 0, 0
	for _, sc := range proxytest.Scenarios(topo) {
		t.Run(sc.Name, func(t *testing.T) {
			f := ipvstest.NewFakes(topo.Family)
			f.Netlink.AddLink(topo.UplinkInterface, topo.NodeIP)
			f.Netlink.AddLink("cbr0", topo.PodGateway)
			p, err := ipvs.NewProxier(ipvs.Config{
				Common: enginebase.Common{IPFamily: topo.Family, NodeName: topo.NodeName},
				Netfilter: enginebase.Netfilter{
					MasqueradeAll: sc.Options.MasqueradeAll,
					LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
				},
			}, f.Interfaces())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			feeder := proxytest.NewFeeder(p)
			for i, st := range sc.Steps {
				if err := feeder.Apply(st.Objects); err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					feeder.Synced()
				}
				if err := p.Sync(context.Background()); err != nil {
					t.Fatalf("step %s: %v", st.Name, err)
				}
				up, err := loadUpstreamIPVSState(filepath.Join(upstreamIPVSStateDir, proxytest.StepFileName(sc.Name, st.Name)+".ipvs"))
				if err != nil {
					t.Fatal(err)
				}
				ours := ipvsSources{IPVS: f.IPVS, IPSet: f.IPSet, Netlink: f.Netlink, Saved: f.IPTables.Dump()}
				for _, c := range st.Checks {
					wantRep, err := traceIPVSSources(ours, c.Packet, node)
					if err != nil {
						t.Fatalf("step %s check %s over ours: %v", st.Name, c.Name, err)
					}
					gotRep, err := traceIPVSSources(up, c.Packet, node)
					if err != nil {
						t.Errorf("step %s check %s over upstream's: %v", st.Name, c.Name, err)
						continue
					}
					want, err := reportResult(wantRep)
					if err != nil {
						t.Fatal(err)
					}
					got, err := reportResult(gotRep)
					if err != nil {
						t.Fatal(err)
					}
					total++
					if reflect.DeepEqual(got.Normalize(), want.Normalize()) {
						continue
					}
					differed++
					if upstreamFallbackSteps[sc.Name+"/"+st.Name] && got.Verdict == proxytest.Forwarded && want.Verdict != proxytest.Forwarded {
						t.Logf("step %s check %s: upstream's local-policy fallback: upstream %s, ours %s", st.Name, c.Name, got, want)
						continue
					}
					t.Errorf("step %s check %s:\n  packet:   %s\n  upstream: %s\n  ours:     %s", st.Name, c.Name, c.Packet, got, want)
				}
			}
		})
	}
	t.Logf("trace over upstream v1.37.2's state agreed with trace over ours on %d of %d checks", total-differed, total)
}

// upstreamFallbackSteps are the steps where kube-proxy v1.37.2 fills a
// virtual server of an externalTrafficPolicy: Local service that has no
// local endpoint with the cluster's endpoints (kubernetes#97081), which
// the engine leaves empty: the ipvs package's localPolicyFallbackSteps.
var upstreamFallbackSteps = map[string]bool{
	"external-traffic-policy-local/remote-only": true,
	"internal-traffic-policy-local/remote-only": true,
	"udp-conntrack/endpoint-back":               true,
}

// upstreamVSFlagsRe: the stored listing's flags other than persistence,
// which ipvstest does not load.
var upstreamVSFlagsRe = regexp.MustCompile(` flags 0x[0-9a-f]+`)

// readUpstreamIPVSSections reads one stored step into its four sections,
// by the name of the tool whose listing each is: "ipvs" (ipvsadm -Ln),
// "kube-ipvs0" (the addresses bound to it, one a line), "ipset" (ipset
// list) and "iptables" (iptables-save).
func readUpstreamIPVSSections(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	parts := map[string]string{}
	cur := ""
	for _, l := range strings.Split(string(raw), "\n") {
		switch l {
		case "# ipvsadm -Ln":
			cur = "ipvs"
		case "# ip addr show kube-ipvs0":
			cur = "kube-ipvs0"
		case "# ipset list":
			cur = "ipset"
		case "# iptables-save":
			cur = "iptables"
		default:
			if cur == "" && strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("%s: line %q before the first section", path, l)
			}
			parts[cur] += l + "\n"
		}
	}
	return parts, nil
}

// loadUpstreamIPVSState reads one stored step (four sections: ipvsadm
// -Ln, kube-ipvs0's addresses, ipset list, iptables-save) into the
// sources trace reads a node from.
func loadUpstreamIPVSState(path string) (ipvsSources, error) {
	parts, err := readUpstreamIPVSSections(path)
	if err != nil {
		return ipvsSources{}, err
	}
	f := ipvstest.NewFakes(v1.IPv4Protocol)
	if err := f.IPVS.Load(upstreamVSFlagsRe.ReplaceAllString(parts["ipvs"], "")); err != nil {
		return ipvsSources{}, fmt.Errorf("%s: %w", path, err)
	}
	var bound []netip.Addr
	for _, l := range strings.Fields(parts["kube-ipvs0"]) {
		a, err := netip.ParseAddr(l)
		if err != nil {
			return ipvsSources{}, fmt.Errorf("%s: kube-ipvs0: %w", path, err)
		}
		bound = append(bound, a)
	}
	f.Netlink.AddLink(ipvs.DummyDevice, bound...)
	var set *ipvs.Set
	for _, l := range strings.Split(parts["ipset"], "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l == "Members:":
		case strings.HasPrefix(l, "Name: "):
			set = &ipvs.Set{Name: strings.TrimPrefix(l, "Name: "), Family: v1.IPv4Protocol}
		case strings.HasPrefix(l, "Type: ") && set != nil:
			set.Type = ipvs.SetType(strings.TrimPrefix(l, "Type: "))
			if err := f.IPSet.CreateSet(*set); err != nil {
				return ipvsSources{}, fmt.Errorf("%s: %w", path, err)
			}
		case set != nil && set.Type != "":
			e, err := parseSetEntry(set.Type, l)
			if err != nil {
				return ipvsSources{}, fmt.Errorf("%s: set %s: %w", path, set.Name, err)
			}
			if err := f.IPSet.AddEntry(set.Name, e); err != nil {
				return ipvsSources{}, fmt.Errorf("%s: set %s: %w", path, set.Name, err)
			}
		default:
			return ipvsSources{}, fmt.Errorf("%s: ipset line %q", path, l)
		}
	}
	return ipvsSources{IPVS: f.IPVS, IPSet: f.IPSet, Netlink: f.Netlink, Saved: parts["iptables"]}, nil
}

// parseSetEntry reads one member as ipset list shows it (ipvs.Entry's
// Render): "10.0.0.1", "10.0.0.1,tcp:80", "10.0.0.1,tcp:80,10.244.0.5",
// "10.0.0.1,tcp:80,10.0.0.0/8", "10.0.0.0/8", "30080".
func parseSetEntry(t ipvs.SetType, s string) (ipvs.Entry, error) {
	var e ipvs.Entry
	if t == ipvs.BitmapPort {
		n, err := strconv.ParseUint(s, 10, 16)
		e.Port = uint16(n)
		return e, err
	}
	if t == ipvs.HashNet {
		pfx, err := netip.ParsePrefix(s)
		e.Net = pfx
		return e, err
	}
	fs := strings.Split(s, ",")
	ip, err := netip.ParseAddr(fs[0])
	if err != nil {
		return e, err
	}
	e.IP = ip
	if t == ipvs.HashIP {
		return e, nil
	}
	if len(fs) < 2 {
		return e, fmt.Errorf("member %q: no protocol and port", s)
	}
	proto, port, ok := strings.Cut(fs[1], ":")
	n, err := strconv.ParseUint(port, 10, 16)
	if !ok || err != nil {
		return e, fmt.Errorf("member %q: bad protocol:port", s)
	}
	e.Protocol, e.Port = v1.Protocol(strings.ToUpper(proto)), uint16(n)
	switch t {
	case ipvs.HashIPPortIP:
		if len(fs) < 3 {
			return e, fmt.Errorf("member %q: no second address", s)
		}
		e.IP2, err = netip.ParseAddr(fs[2])
	case ipvs.HashIPPortNet:
		if len(fs) < 3 {
			return e, fmt.Errorf("member %q: no net", s)
		}
		e.Net, err = netip.ParsePrefix(fs[2])
	}
	return e, err
}
