package iptables_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestLocalhostNodePorts: with Config.LocalhostNodePorts a node port
// answers on 127.0.0.1 from the node (route_localnet set, masqueraded);
// without it, or where it does not apply (IPv6, node port addresses
// without loopback), 127.0.0.1 is left alone and the sysctl untouched.
func TestLocalhostNodePorts(t *testing.T) {
	nodeIP := netip.MustParseAddr("192.168.0.2")
	loop := netip.MustParseAddr("127.0.0.1")
	backend := netip.MustParseAddrPort("10.180.0.1:80")
	for _, tc := range []struct {
		name      string
		localhost bool
		addrs     []netip.Prefix
		serves    bool
	}{
		{name: "on", localhost: true, serves: true},
		{name: "off", localhost: false},
		{name: "on, addresses with loopback", localhost: true, addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("192.168.0.0/24")}, serves: true},
		{name: "off, addresses with loopback", localhost: false, addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/24")}},
		{name: "on, addresses without loopback", localhost: true, addrs: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakes := iptablestest.NewFakes(v1.IPv4Protocol)
			cfg := Config{
				Common:             engine.Common{NodeName: testNode, NodeIPs: []netip.Addr{nodeIP}},
				LocalhostNodePorts: tc.localhost,
				Netfilter: engine.Netfilter{
					NodePortAddresses: tc.addrs,
				},
				LocalAddresses: func() ([]netip.Addr, error) { return []netip.Addr{loop, nodeIP}, nil },
			}
			p, err := NewProxier(cfg, fakes.Interfaces())
			if err != nil {
				t.Fatal(err)
			}
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			p.OnServiceAdd(svc("ns2", "np", "172.30.0.42", nodePort(3001)))
			p.OnEndpointSliceAdd(slice("ns2", "np", "", ep{ip: "10.180.0.1"}))
			mustSync(t, p)

			v, err := fakes.Sysctl.Get(SysctlRouteLocalnet)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.serves]; v != want {
				t.Errorf("route_localnet = %d, want %d", v, want)
			}
			dump := fakes.Dump()
			if has := strings.Contains(dump, `"block incoming localnet connections"`); has != tc.serves {
				t.Errorf("block-localnet rule present = %v, want %v:\n%s", has, tc.serves, dump)
			}

			tr := iptablestest.NewTracer(fakes, iptablestest.TracerConfig{NodeIPs: []netip.Addr{nodeIP}})
			res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromNode, Src: loop, Dst: loop, Port: 3001})
			if err != nil {
				t.Fatal(err)
			}
			if tc.serves {
				if res.Verdict != proxytest.Forwarded || len(res.Backends) != 1 || res.Backends[0] != backend || !res.Masquerade {
					t.Errorf("127.0.0.1:3001 from the node: %+v, want forwarded to %v, masqueraded", res, backend)
				}
			} else if res.Verdict != proxytest.NotProxied {
				t.Errorf("127.0.0.1:3001 from the node: %+v, want not proxied", res)
			}
			// The node IP serves the node port either way.
			res, err = tr.Trace(proxytest.Packet{Origin: proxytest.FromExternal, Src: netip.MustParseAddr("203.0.113.9"), Dst: nodeIP, Port: 3001})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != proxytest.Forwarded {
				t.Errorf("node IP:3001 from outside: %+v, want forwarded", res)
			}
			if !tc.serves {
				return
			}
			// Another host's packet to a loopback service that was not
			// DNAT'd is dropped (kubernetes#90259).
			res, err = tr.Trace(proxytest.Packet{Origin: proxytest.FromExternal, Src: netip.MustParseAddr("203.0.113.9"), Dst: loop, Port: 10250})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != proxytest.Dropped {
				t.Errorf("127.0.0.1:10250 from outside: %+v, want dropped", res)
			}
			// Rules without the sysctl do not work, and the tracer says so.
			if err := fakes.Sysctl.Set(SysctlRouteLocalnet, 0); err != nil {
				t.Fatal(err)
			}
			res, err = tr.Trace(proxytest.Packet{Origin: proxytest.FromNode, Src: loop, Dst: loop, Port: 3001})
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != proxytest.Dropped {
				t.Errorf("127.0.0.1:3001 from the node without route_localnet: %+v, want dropped", res)
			}
		})
	}
}

// TestLocalhostNodePortsIPv6: IPv6 loopback never serves node ports, and
// an IPv6 engine never touches route_localnet.
func TestLocalhostNodePortsIPv6(t *testing.T) {
	fakes := iptablestest.NewFakes(v1.IPv6Protocol)
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, LocalhostNodePorts: true}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	p.OnServiceAdd(svc("ns1", "v6", "fd00:30::41", nodePort(3001)))
	p.OnEndpointSliceAdd(slice("ns1", "v6", "", ep{ip: "fd00:10:1::5"}))
	mustSync(t, p)
	if v, _ := fakes.Sysctl.Get(SysctlRouteLocalnet); v != 0 || fakes.Sysctl.Calls()["Set"] != 0 {
		t.Errorf("route_localnet = %d after %d Set calls, want untouched", v, fakes.Sysctl.Calls()["Set"])
	}
	dump := fakes.Dump()
	if !strings.Contains(dump, "! -d ::1/128") || strings.Contains(dump, "KUBE-FIREWALL") {
		t.Errorf("want the node-port tail rule to leave out ::1 and no KUBE-FIREWALL:\n%s", dump)
	}
	tr := iptablestest.NewTracer(fakes, iptablestest.TracerConfig{})
	res, err := tr.Trace(proxytest.Packet{Origin: proxytest.FromNode, Src: netip.IPv6Loopback(), Dst: netip.IPv6Loopback(), Port: 3001})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != proxytest.NotProxied {
		t.Errorf("[::1]:3001 from the node: %+v, want not proxied", res)
	}
}

// TestLocalhostNodePortsSysctlFails: a full sync that cannot set
// route_localnet fails with ErrRouteLocalnet and writes nothing; the next
// one, once it can, succeeds.
func TestLocalhostNodePortsSysctlFails(t *testing.T) {
	fakes := iptablestest.NewFakes(v1.IPv4Protocol)
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, LocalhostNodePorts: true}, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	fakes.Sysctl.FailOn("Set", 1, errors.New("read-only file system"))
	err = p.Sync(t.Context())
	if !errors.Is(err, ErrRouteLocalnet) {
		t.Fatalf("Sync = %v, want ErrRouteLocalnet", err)
	}
	if n := fakes.IPTables.Calls()["Restore"]; n != 0 {
		t.Errorf("%d restores after the sysctl failed, want none", n)
	}
	mustSync(t, p)
	if v, _ := fakes.Sysctl.Get(SysctlRouteLocalnet); v != 1 {
		t.Errorf("route_localnet = %d after the retry, want 1", v)
	}
}
