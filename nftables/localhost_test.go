//go:build linux

package nftables_test

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// localhostCluster is makeCluster(20, 2) plus one UDP node port (svc-udp,
// 31053) and one SCTP node port (svc-sctp, 31132).
func localhostCluster() *cluster {
	c := makeCluster(20, 2)
	for _, extra := range []struct {
		i     int
		proto v1.Protocol
		port  int32
	}{{100, v1.ProtocolUDP, 31053}, {101, v1.ProtocolSCTP, 31132}} {
		svc := makeService(extra.i)
		svc.Spec.Type = v1.ServiceTypeNodePort
		svc.Spec.Ports[0].Protocol = extra.proto
		svc.Spec.Ports[0].NodePort = extra.port
		sl := makeSlice(extra.i, 2, 0)
		sl.Ports[0].Protocol = &extra.proto
		c.services = append(c.services, svc)
		c.slices = append(c.slices, sl)
	}
	return c
}

// toIPv6 moves c's services and endpoints to IPv6 addresses.
func toIPv6(c *cluster) {
	v6 := func(s string) string {
		a := netip.MustParseAddr(s).As4()
		return netip.AddrFrom16([16]byte{0: 0xfd, 1: 0, 2: a[0], 3: a[1], 14: a[2], 15: a[3]}).String()
	}
	for _, s := range c.services {
		s.Spec.ClusterIP = v6(s.Spec.ClusterIP)
		s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol}
	}
	for _, sl := range c.slices {
		sl.AddressType = discovery.AddressTypeIPv6
		for i := range sl.Endpoints {
			sl.Endpoints[i].Addresses = []string{v6(sl.Endpoints[i].Addresses[0])}
		}
	}
}

func localhostConfig(gate bool, npa ...string) nftables.Config {
	cfg := testConfig()
	cfg.LocalhostNodePorts = gate
	for _, s := range npa {
		cfg.NodePortAddresses = append(cfg.NodePortAddresses, netip.MustParsePrefix(s))
	}
	return cfg
}

// localhostLines are the dump's lines about localhost node ports.
func localhostLines(dump string) []string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "localhost-nodeport") {
			out = append(out, l)
		}
	}
	return out
}

func traceLocalhost(t *testing.T, fakes *nftablestest.Fakes, proto v1.Protocol, port int) proxytest.Verdict {
	t.Helper()
	dst := netip.MustParseAddr("127.0.0.1")
	if fakes.Family() == v1.IPv6Protocol {
		dst = netip.IPv6Loopback()
	}
	tr := nftablestest.NewTracer(fakes, nftablestest.TracerConfig{NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.50.10")}})
	res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromNode, Src: dst, Dst: dst, Port: port, Protocol: proto})
	if err != nil {
		t.Fatal(err)
	}
	return res.Verdict
}

// The gate off (v1.37's default): no localhost objects, loopback node
// ports untouched by the table.
func TestLocalhostNodePortsOff(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, localhostConfig(false, "127.0.0.0/8", "192.168.50.0/24"))
	localhostCluster().feed(p)
	mustSync(t, p)
	if l := localhostLines(fakes.Dump()); len(l) != 0 {
		t.Errorf("gate off, localhost objects:\n%s", strings.Join(l, "\n"))
	}
	for _, c := range []struct {
		proto v1.Protocol
		port  int
	}{{v1.ProtocolTCP, 30000}, {v1.ProtocolUDP, 31053}} {
		if v := traceLocalhost(t, fakes, c.proto, c.port); v != proxytest.NotProxied {
			t.Errorf("%s 127.0.0.1:%d: %v, want not proxied", c.proto, c.port, v)
		}
	}
}

// The gate on without loopback in the node-port addresses: every
// protocol's localhost node ports are rejected and counted.
func TestLocalhostNodePortsRejectAll(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(family), func(t *testing.T) {
			fakes := nftablestest.NewFakes(family)
			cfg := localhostConfig(true)
			cfg.IPFamily = family
			if family == v1.IPv6Protocol {
				cfg.NodeIPs = []netip.Addr{netip.MustParseAddr("fd00::10")}
				cfg.LocalDetector.CIDR = netip.MustParsePrefix("fd00:10::/64")
			}
			p := newTestProxier(t, fakes, cfg)
			c := localhostCluster()
			if family == v1.IPv6Protocol {
				toIPv6(c)
			}
			c.feed(p)
			mustSync(t, p)
			dump := fakes.Dump()
			for _, want := range []string{
				"add map " + string(nftables.Family(family)) + " kube-proxy localhost-nodeport-reject-ports { type inet_proto . inet_service : verdict ; comment \"localhost NodePorts rejected by kube-proxy\" ; }",
				"add counter " + string(nftables.Family(family)) + " kube-proxy localhost-nodeport-rejected-tcp",
				"add counter " + string(nftables.Family(family)) + " kube-proxy localhost-nodeport-rejected-udp",
				"add counter " + string(nftables.Family(family)) + " kube-proxy localhost-nodeport-rejected-sctp",
				"localhost-nodeport-reject-ports { tcp . 30000 : goto localhost-nodeport-reject-tcp }",
				"localhost-nodeport-reject-ports { udp . 31053 : goto localhost-nodeport-reject-udp }",
				"localhost-nodeport-reject-ports { sctp . 31132 : goto localhost-nodeport-reject-sctp }",
				"counter name \"localhost-nodeport-rejected-udp\" reject",
				"meta l4proto . th dport vmap @localhost-nodeport-reject-ports",
			} {
				if !strings.Contains(dump, want) {
					t.Errorf("dump lacks %q:\n%s", want, strings.Join(localhostLines(dump), "\n"))
				}
			}
			for _, c := range []struct {
				proto v1.Protocol
				port  int
			}{{v1.ProtocolTCP, 30000}, {v1.ProtocolUDP, 31053}, {v1.ProtocolSCTP, 31132}} {
				if v := traceLocalhost(t, fakes, c.proto, c.port); v != proxytest.Rejected {
					t.Errorf("%s loopback:%d: %v, want rejected", c.proto, c.port, v)
				}
			}
			// A loopback port that is no node port is left alone.
			if v := traceLocalhost(t, fakes, v1.ProtocolTCP, 30999); v != proxytest.NotProxied {
				t.Errorf("tcp loopback:30999: %v, want not proxied", v)
			}
		})
	}
}

// The gate on with loopback named in the node-port addresses: TCP goes to
// the userspace proxy (nothing in the table), UDP and SCTP are rejected.
func TestLocalhostNodePortsProxyRejectsOthers(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, localhostConfig(true, "127.0.0.0/8", "192.168.50.0/24"))
	localhostCluster().feed(p)
	defer p.Close()
	mustSync(t, p)
	dump := fakes.Dump()
	if strings.Contains(dump, "localhost-nodeport-reject-tcp") || strings.Contains(dump, "localhost-nodeport-rejected-tcp") {
		t.Errorf("TCP rejected with the proxy on:\n%s", strings.Join(localhostLines(dump), "\n"))
	}
	if v := traceLocalhost(t, fakes, v1.ProtocolTCP, 30000); v != proxytest.NotProxied {
		t.Errorf("tcp 127.0.0.1:30000: %v, want not proxied (the proxy's socket)", v)
	}
	if v := traceLocalhost(t, fakes, v1.ProtocolUDP, 31053); v != proxytest.Rejected {
		t.Errorf("udp 127.0.0.1:31053: %v, want rejected", v)
	}
}

// Switching the gate and the node-port addresses between restarts
// converges to what a fresh table holds, and a restart with the same
// configuration writes nothing.
func TestLocalhostNodePortsTransitions(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := localhostCluster()
	configs := []struct {
		name string
		cfg  nftables.Config
	}{
		{"off", localhostConfig(false)},
		{"reject-all", localhostConfig(true)},
		{"proxy", localhostConfig(true, "127.0.0.1/32", "192.168.50.0/24")},
		{"reject-all", localhostConfig(true)},
		{"off", localhostConfig(false)},
		{"proxy", localhostConfig(true, "127.0.0.1/32", "192.168.50.0/24")},
		{"off", localhostConfig(false)},
	}
	for _, step := range configs {
		p := newTestProxier(t, fakes, step.cfg)
		c.feed(p)
		mustSync(t, p)
		fresh := nftablestest.NewFakes(v1.IPv4Protocol)
		pf := newTestProxier(t, fresh, step.cfg)
		c.feed(pf)
		mustSync(t, pf)
		if got, want := sortedLines(withoutEmptyChains(fakes.NFTables)), sortedLines(withoutEmptyChains(fresh.NFTables)); got != want {
			t.Fatalf("%s: table differs from a fresh one's:\n got %s\nwant %s", step.name,
				strings.Join(localhostLines(got), "\n"), strings.Join(localhostLines(want), "\n"))
		}
		again := newTestProxier(t, fakes, step.cfg)
		c.feed(again)
		if out := mustSync(t, again); out.Result.Writes != 0 {
			t.Errorf("%s: restart wrote %d objects", step.name, out.Result.Writes)
		}
		p.Close()
		pf.Close()
		again.Close()
	}
}

// Partial syncs add and remove the reject elements of node ports.
func TestLocalhostNodePortsPartial(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, localhostConfig(true))
	c := localhostCluster()
	c.feed(p)
	mustSync(t, p)
	svc := makeService(200)
	svc.Spec.Type = v1.ServiceTypeNodePort
	svc.Spec.Ports[0].NodePort = 32000
	p.OnServiceAdd(svc)
	if out := mustSync(t, p); out.Full {
		t.Fatal("want a partial sync")
	}
	if !strings.Contains(fakes.Dump(), "tcp . 32000 : goto localhost-nodeport-reject-tcp") {
		t.Error("partial sync did not add the new node port's reject element")
	}
	if v := traceLocalhost(t, fakes, v1.ProtocolTCP, 32000); v != proxytest.Rejected {
		t.Errorf("tcp 127.0.0.1:32000: %v, want rejected", v)
	}
	p.OnServiceDelete(svc)
	mustSync(t, p)
	if strings.Contains(fakes.Dump(), "32000") {
		t.Error("partial sync left the deleted node port's reject element")
	}
	if fakes.NFTables.Listings() == 0 {
		t.Skip("no listing counted")
	}
}
