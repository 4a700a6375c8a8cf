package iptables_test

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// state is a set of services and slices handed to a fresh proxier.
type state struct {
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

func (s state) load(p *Proxier) {
	for _, svc := range s.services {
		p.OnServiceAdd(svc)
	}
	for _, sl := range s.slices {
		p.OnEndpointSliceAdd(sl)
	}
}

var ipv4Config = Config{
	Common: engine.Common{NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}},
	Netfilter: engine.Netfilter{
		LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.0.0.0/8")},
	},
}

// goldenStates are representative states; each one's whole rendered
// ruleset (the fake's dump after one sync) is in testdata/<name>.golden.
var goldenStates = []struct {
	name   string
	family v1.IPFamily
	cfg    Config
	state  state
}{
	{
		name: "clusterip", family: v1.IPv4Protocol, cfg: ipv4Config,
		state: state{
			services: []*v1.Service{
				svc("ns1", "svc1", "172.30.0.41"),
				svc("ns1", "noeps", "172.30.0.44"),
			},
			slices: []*discovery.EndpointSlice{
				slice("ns1", "svc1", "", ep{ip: "10.180.0.1"}, ep{ip: "10.180.0.2", node: testNode}, ep{ip: "10.180.0.3"}),
			},
		},
	},
	{
		name: "external", family: v1.IPv4Protocol, cfg: ipv4Config,
		state: state{
			services: []*v1.Service{
				svc("ns2", "np", "172.30.0.42", nodePort(3001)),
				svc("ns3", "lb", "172.30.0.43", loadBalancer(3002, "1.2.3.4", "203.0.113.0/25", "192.168.0.0/24")),
				svc("ns4", "eip", "172.30.0.44", externalIPs("192.168.99.11")),
				svc("ns5", "lblocal", "172.30.0.45", loadBalancer(3003, "5.6.7.8"), etpLocal(30000)),
				svc("ns6", "lblocalnone", "172.30.0.46", loadBalancer(3004, "5.6.7.9"), etpLocal(30001), externalIPs("192.168.99.12")),
				svc("ns7", "npnoeps", "172.30.0.47", nodePort(3005), externalIPs("192.168.99.13")),
			},
			slices: []*discovery.EndpointSlice{
				slice("ns2", "np", "", ep{ip: "10.180.0.1"}),
				slice("ns3", "lb", "", ep{ip: "10.180.0.2"}),
				slice("ns4", "eip", "", ep{ip: "10.180.0.3"}),
				slice("ns5", "lblocal", "", ep{ip: "10.180.0.4", node: testNode}, ep{ip: "10.180.0.5"}),
				slice("ns6", "lblocalnone", "", ep{ip: "10.180.0.6"}),
			},
		},
	},
	{
		name: "policies-affinity-udp", family: v1.IPv4Protocol,
		cfg: Config{Netfilter: engine.Netfilter{MasqueradeAll: true, LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: "veth"}}},
		state: state{
			services: []*v1.Service{
				svc("ns1", "itplocal", "172.30.0.51", itpLocal),
				svc("ns1", "itplocalnone", "172.30.0.52", itpLocal),
				svc("ns1", "sticky", "172.30.0.53", affinity(600)),
				svc("ns1", "dns", "172.30.0.10", udp),
				svc("ns1", "terminating", "172.30.0.54"),
			},
			slices: []*discovery.EndpointSlice{
				slice("ns1", "itplocal", "", ep{ip: "10.180.1.1", node: testNode}, ep{ip: "10.180.1.2"}),
				slice("ns1", "itplocalnone", "", ep{ip: "10.180.1.3"}),
				slice("ns1", "sticky", "", ep{ip: "10.180.1.4"}, ep{ip: "10.180.1.5"}),
				slice("ns1", "dns", v1.ProtocolUDP, ep{ip: "10.180.1.6"}),
				slice("ns1", "terminating", "", ep{ip: "10.180.1.7", terminating: true}),
			},
		},
	},
	{
		// kube-proxy's default: node ports on 127.0.0.0/8 too, with
		// KUBE-FIREWALL's "block incoming localnet connections".
		name: "localhost-nodeports", family: v1.IPv4Protocol,
		cfg: Config{Common: ipv4Config.Common, Netfilter: engine.Netfilter{LocalDetector: ipv4Config.LocalDetector}, LocalhostNodePorts: true},
		state: state{
			services: []*v1.Service{svc("ns2", "np", "172.30.0.42", nodePort(3001))},
			slices:   []*discovery.EndpointSlice{slice("ns2", "np", "", ep{ip: "10.180.0.1"})},
		},
	},
	{
		// Node port addresses holding loopback: 127.0.0.1 gets its own
		// tail rule (with LocalhostNodePorts; see TestLocalhostNodePorts
		// for it off).
		name: "localhost-nodeport-addresses", family: v1.IPv4Protocol,
		cfg: Config{
			Netfilter: engine.Netfilter{
				NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/24")},
			},
			LocalAddresses: func() ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("10.1.1.1")}, nil
			},
			LocalhostNodePorts: true,
		},
		state: state{
			services: []*v1.Service{svc("ns2", "np", "172.30.0.42", nodePort(3001))},
			slices:   []*discovery.EndpointSlice{slice("ns2", "np", "", ep{ip: "10.180.0.1"})},
		},
	},
	{
		name: "ipv6-nodeport-addresses", family: v1.IPv6Protocol,
		cfg: Config{
			Netfilter: engine.Netfilter{
				NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("fd00:1::/64"), netip.MustParsePrefix("10.0.0.0/8")},
				LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeNodeCIDR, CIDR: netip.MustParsePrefix("fd00:10:1::/64")},
			},
			LocalAddresses: func() ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("fd00:1::2"), netip.MustParseAddr("::1"), netip.MustParseAddr("fd00:2::2"), netip.MustParseAddr("10.1.1.1")}, nil
			},
			LocalhostNodePorts: true, // never on IPv6
		},
		state: state{
			services: []*v1.Service{
				svc("ns1", "v6", "fd00:30::41", nodePort(3001)),
			},
			slices: []*discovery.EndpointSlice{
				slice("ns1", "v6", "", ep{ip: "fd00:10:1::5", node: testNode}),
			},
		},
	},
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenStates {
		t.Run(tc.name, func(t *testing.T) {
			p, fake := newTestProxier(t, tc.cfg, tc.family)
			tc.state.load(p)
			mustSync(t, p)
			got := fake.Dump()
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("rules differ from %s:\n%s", path, lineDiff(string(want), got))
			}
			// The dry run renders what the sync applied.
			plan, err := p.DryRun(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			replay := newFakeWithBase(t, tc.family, tc.cfg)
			if err := replay.Restore(t.Context(), xtables.RestoreInput{Text: []byte(plan)}); err != nil {
				t.Fatalf("Plan output does not restore: %v", err)
			}
			if d := replay.Dump(); d != got {
				t.Errorf("Plan output differs from the applied rules:\n%s", lineDiff(got, d))
			}
		})
	}
}
