package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

// topologyNodeView describes the conformance topology's node as
// readNodeView reads it from the namespaces internal/netnstest builds.
func topologyNodeView(topo proxytest.Topology) *nodeView {
	n := &nodeView{Addrs: []netip.Addr{topo.NodeIP, topo.PodGateway}, RouteLocalnet: true}
	if topo.Family == v1.IPv6Protocol {
		n.DefaultInterface6 = topo.WorldInterface
	} else {
		n.DefaultInterface4 = topo.WorldInterface
	}
	for _, pod := range topo.Pods() {
		n.Routes = append(n.Routes, nodeRoute{Prefix: netip.PrefixFrom(pod.IP, pod.IP.BitLen()), Interface: pod.HostInterface})
	}
	for addr, iface := range map[netip.Addr]string{topo.ExternalClient: topo.UplinkInterface, topo.ExternalClient2: topo.Uplink2Interface} {
		if addr.IsValid() && iface != "" {
			n.Routes = append(n.Routes, nodeRoute{Prefix: netip.PrefixFrom(addr, addr.BitLen()), Interface: iface})
		}
	}
	return n
}

// topologyIPTablesConfig configures the iptables engine for the
// conformance topology, as the iptables package's own conformance tests do.
func topologyIPTablesConfig(topo proxytest.Topology, opts proxytest.Options) iptables.Config {
	return iptables.Config{
		Common: enginebase.Common{NodeName: topo.NodeName, NodeIPs: []netip.Addr{topo.NodeIP}},
		Netfilter: enginebase.Netfilter{
			MasqueradeAll:     opts.MasqueradeAll,
			LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
			NodePortAddresses: []netip.Prefix{proxytest.HostPrefix(topo.NodeIP)},
		},
		LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{topo.NodeIP, topo.PodGateway}, nil },
	}
}

// reportResult turns a trace report back into the conformance table's
// vocabulary.
func reportResult(rep *traceReport) (proxytest.Result, error) {
	var res proxytest.Result
	switch rep.Result {
	case "forwarded":
		res.Verdict = proxytest.Forwarded
	case "not-proxied":
		res.Verdict = proxytest.NotProxied
	case "rejected":
		res.Verdict = proxytest.Rejected
	case "dropped":
		res.Verdict = proxytest.Dropped
	default:
		return res, fmt.Errorf("trace result %q", rep.Result)
	}
	res.Masquerade, res.Sticky = rep.Masq, rep.Sticky
	for _, b := range rep.Reach {
		ap, err := netip.ParseAddrPort(b.Backend)
		if err != nil {
			return res, err
		}
		res.Backends = append(res.Backends, ap)
	}
	return res, nil
}

// dumpTracer traces through what trace reads: the fake's rules as
// iptables-save text, loaded again.
type dumpTracer struct {
	fakes *iptablestest.Fakes
	node  *nodeView
}

func (d dumpTracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	rep, err := traceIPTablesDump(d.fakes.Dump(), p, d.node, nil)
	if err != nil {
		return proxytest.Result{}, err
	}
	return reportResult(rep)
}

func (d dumpTracer) Dump() string { return d.fakes.Dump() }

// TestTraceIPTablesDumpConformance: for every check of the conformance
// table, trace over the iptables engine's rules as iptables-save text
// answers what the scenario wants.
func TestTraceIPTablesDumpConformance(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			conformance.Run(t, family, conformance.Harness{New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
				fakes := iptablestest.NewFakes(topo.Family)
				p, err := iptables.NewProxier(topologyIPTablesConfig(topo, opts), fakes.Interfaces())
				if err != nil {
					t.Fatal(err)
				}
				return p, dumpTracer{fakes: fakes, node: topologyNodeView(topo)}
			}})
		})
	}
}

// cannedTools answers the listing tools from files; others are missing.
func cannedTools(t *testing.T, outputs map[string]string) toolRunner {
	return func(ctx context.Context, name string, args ...string) ([]byte, error) {
		key := strings.TrimSpace(name + " " + strings.Join(args, " "))
		if out, ok := outputs[key]; ok {
			return []byte(out), nil
		}
		return nil, &toolMissingError{tool: name}
	}
}

// kubeProxyNode is the node of xtablestest's kube-proxy fixture.
func kubeProxyNode() *nodeView {
	return &nodeView{
		Addrs:             []netip.Addr{netip.MustParseAddr("192.168.0.10")},
		Routes:            []nodeRoute{{Prefix: netip.MustParsePrefix("10.180.0.0/24"), Interface: "cbr0"}},
		DefaultInterface4: "eth0",
	}
}

// TestTraceKubeProxySave: upstream kube-proxy's rules as iptables-nft-save
// prints them (xtablestest's fixture, saved from a real kernel).
func TestTraceKubeProxySave(t *testing.T) {
	save, err := os.ReadFile("../../iptables/xtables/xtablestest/testdata/kubeproxy-v4.nft-save")
	if err != nil {
		t.Fatal(err)
	}
	run := cannedTools(t, map[string]string{"iptables-nft-save": string(save), "iptables-legacy-save": ""})
	o := &traceOptions{}
	p, err := parseDestination("172.30.0.41:80/tcp")
	if err != nil {
		t.Fatal(err)
	}
	p.Src = netip.MustParseAddr("10.180.0.5")
	rep, err := traceNode(context.Background(), o, p, kubeProxyNode(), run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Dataplane != "iptables (nft backend)" || rep.Packet.Origin != "pod" || rep.Result != "forwarded" || rep.Masq {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Reach) != 2 {
		t.Fatalf("backends %+v, want two", rep.Reach)
	}
	for _, b := range rep.Reach {
		if b.Probability == nil || *b.Probability != 0.5 {
			t.Errorf("backend %s probability %v, want 0.5", b.Backend, b.Probability)
		}
		if len(b.Services) == 0 || b.Services[0] != "ns1/svc1:p80" {
			t.Errorf("backend %s services %v, want ns1/svc1:p80", b.Backend, b.Services)
		}
	}
	var text strings.Builder
	rep.writeText(&text)
	for _, want := range []string{"pod 10.180.0.5 -> 172.30.0.41:80/tcp", " 50.0%  10.180.0.1:80  (ns1/svc1:p80)", "KUBE-SVC-", "KUBE-SEP-"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(b), `"probability":0.5`) {
		t.Errorf("json %s (%v)", b, err)
	}
	t.Log("\n" + text.String())

	// From outside the node, to the load balancer's IP from a source
	// outside its sourceRanges: dropped by the firewall chain.
	p, _ = parseDestination("5.6.7.8:80")
	p.Src = netip.MustParseAddr("198.51.100.1")
	rep, err = traceNode(context.Background(), o, p, kubeProxyNode(), run)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Packet.Origin != "external" || rep.Result != "dropped" {
		t.Errorf("load balancer from outside its source ranges: %+v", rep)
	}
}

// TestTraceSaysWhatItCannotRead: no tool, and a foreign rule the tracer
// does not model on the packet's way.
func TestTraceSaysWhatItCannotRead(t *testing.T) {
	p, _ := parseDestination("172.30.0.41:80/tcp")
	p.Src = netip.MustParseAddr("10.180.0.5")
	_, err := traceNode(context.Background(), &traceOptions{mode: modeIPTables}, p, kubeProxyNode(), cannedTools(t, nil))
	var missing *toolMissingError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "not installed") {
		t.Errorf("no tools: %v", err)
	}
	foreign := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -m foo --bar 1 -j ACCEPT\nCOMMIT\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\nCOMMIT\n"
	_, err = traceNode(context.Background(), &traceOptions{mode: modeIPTables}, p, kubeProxyNode(), cannedTools(t, map[string]string{"iptables-nft-save": foreign}))
	if !errors.Is(err, iptablestest.ErrUnsupported) || !strings.Contains(err.Error(), "does not model") {
		t.Errorf("foreign rule: %v", err)
	}
}

func TestParseTraceOptions(t *testing.T) {
	var stderr strings.Builder
	for _, bad := range [][]string{nil, {"--to", "10.0.0.1"}, {"--to", "10.0.0.1:80/icmp"}, {"--to", "10.0.0.1:80", "--from", "fd00::1"}, {"--to", "10.0.0.1:80", "-o", "yaml"}} {
		if _, _, err := parseTraceOptions(bad, &stderr); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	o, p, err := parseTraceOptions([]string{"--proxy-mode", "iptables", "--from", "10.244.1.5", "--to", "10.96.0.10:53/udp", "-o", "json"}, &stderr)
	if err != nil || o.output != "json" || p.Protocol != v1.ProtocolUDP || p.Port != 53 || p.Src != netip.MustParseAddr("10.244.1.5") {
		t.Errorf("%+v %+v %v", o, p, err)
	}
}

// TestTraceIPVSConformance: for every check of the conformance table,
// trace over the IPVS engine's state, copied as trace copies the node's
// (virtual and real servers, KUBE- ipsets, kube-ipvs0 addresses, the
// iptables rules as iptables-save text), answers what the scenario
// wants, with the IPVS mode's explained quirks.
func TestTraceIPVSConformance(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			topo := proxytest.DefaultTopology(family)
			conformance.Run(t, family, conformance.Harness{
				Quirks: ipvstest.ConformanceQuirks(topo),
				New: func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer) {
					f := ipvstest.NewFakes(topo.Family)
					f.Netlink.AddLink(topo.UplinkInterface, topo.NodeIP)
					f.Netlink.AddLink("cbr0", topo.PodGateway)
					p, err := ipvs.NewProxier(ipvs.Config{
						Common: enginebase.Common{IPFamily: topo.Family, NodeName: topo.NodeName},
						Netfilter: enginebase.Netfilter{
							MasqueradeAll: opts.MasqueradeAll,
							LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
						},
					}, f.Interfaces())
					if err != nil {
						t.Fatal(err)
					}
					return p, ipvsDumpTracer{f: f, node: topologyNodeView(topo)}
				},
			})
		})
	}
}

type ipvsDumpTracer struct {
	f    *ipvstest.Fakes
	node *nodeView
}

func (d ipvsDumpTracer) Trace(p proxytest.Packet) (proxytest.Result, error) {
	rep, err := traceIPVSSources(ipvsSources{IPVS: d.f.IPVS, IPSet: d.f.IPSet, Netlink: d.f.Netlink, Saved: d.f.IPTables.Dump()}, p, d.node)
	if err != nil {
		return proxytest.Result{}, err
	}
	return reportResult(rep)
}

func (d ipvsDumpTracer) Dump() string { return d.f.Dump() }

// TestTraceIPVSReport: the report over an IPVS state names the virtual
// server and its real servers with weight-shared probabilities.
func TestTraceIPVSReport(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := ipvstest.NewFakes(topo.Family)
	f.Netlink.AddLink(topo.UplinkInterface, topo.NodeIP)
	f.Netlink.AddLink("cbr0", topo.PodGateway)
	p, err := ipvs.NewProxier(ipvs.Config{
		Common: enginebase.Common{IPFamily: topo.Family, NodeName: topo.NodeName},
		Netfilter: enginebase.Netfilter{
			LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: topo.ClusterCIDR},
		},
	}, f.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	sc := proxytest.Scenarios(topo)[0] // cluster-ip
	feeder := proxytest.NewFeeder(p)
	if err := feeder.Apply(sc.Steps[0].Objects); err != nil {
		t.Fatal(err)
	}
	feeder.Synced()
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := sc.Steps[0].Checks[0]
	rep, err := traceIPVSSources(ipvsSources{IPVS: f.IPVS, IPSet: f.IPSet, Netlink: f.Netlink, Saved: f.IPTables.Dump()}, c.Packet, topologyNodeView(topo))
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	rep.writeText(&text)
	t.Log("\n" + text.String())
	if rep.Result != "forwarded" || len(rep.Reach) < 2 || !strings.Contains(text.String(), "ipvs: virtual server tcp") || !strings.Contains(text.String(), "-> real server") {
		t.Errorf("report:\n%s", text.String())
	}
	for _, b := range rep.Reach {
		if want := *formatProbability(1 / float64(len(rep.Reach))); b.Probability == nil || *b.Probability != want {
			t.Errorf("backend %s probability %v, want %v", b.Backend, b.Probability, want)
		}
	}
}
