//go:build linux

package ipvs_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
)

// countingIPVS counts the mutating calls that reach the kernel.
type countingIPVS struct {
	ipvs.Interface
	mutations, deletions atomic.Int64
}

func (c *countingIPVS) AddVirtualServer(vs *ipvs.VirtualServer) error {
	c.mutations.Add(1)
	return c.Interface.AddVirtualServer(vs)
}
func (c *countingIPVS) UpdateVirtualServer(vs *ipvs.VirtualServer) error {
	c.mutations.Add(1)
	return c.Interface.UpdateVirtualServer(vs)
}
func (c *countingIPVS) DeleteVirtualServer(vs *ipvs.VirtualServer) error {
	c.mutations.Add(1)
	c.deletions.Add(1)
	return c.Interface.DeleteVirtualServer(vs)
}
func (c *countingIPVS) AddRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	c.mutations.Add(1)
	return c.Interface.AddRealServer(vs, rs)
}
func (c *countingIPVS) UpdateRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	c.mutations.Add(1)
	return c.Interface.UpdateRealServer(vs, rs)
}
func (c *countingIPVS) DeleteRealServer(vs *ipvs.VirtualServer, rs *ipvs.RealServer) error {
	c.mutations.Add(1)
	c.deletions.Add(1)
	return c.Interface.DeleteRealServer(vs, rs)
}
func (c *countingIPVS) Flush() error {
	c.deletions.Add(1)
	return c.Interface.Flush()
}

type countingIPSet struct {
	ipvs.IPSet
	mutations, deletions atomic.Int64
}

func (c *countingIPSet) CreateSet(s ipvs.Set) error {
	c.mutations.Add(1)
	return c.IPSet.CreateSet(s)
}
func (c *countingIPSet) DestroySet(n string) error {
	c.mutations.Add(1)
	c.deletions.Add(1)
	return c.IPSet.DestroySet(n)
}
func (c *countingIPSet) FlushSet(n string) error {
	c.mutations.Add(1)
	c.deletions.Add(1)
	return c.IPSet.FlushSet(n)
}
func (c *countingIPSet) AddEntry(s string, e ipvs.Entry) error {
	c.mutations.Add(1)
	return c.IPSet.AddEntry(s, e)
}
func (c *countingIPSet) DelEntry(s string, e ipvs.Entry) error {
	c.mutations.Add(1)
	c.deletions.Add(1)
	return c.IPSet.DelEntry(s, e)
}

type kernelProxier struct {
	*kernelEnv
	p     *ipvs.Proxier
	cipvs *countingIPVS
	cset  *countingIPSet
}

func (k *kernelEnv) proxier(t testing.TB, cfg ipvs.Config) *kernelProxier {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	kp := &kernelProxier{kernelEnv: k, cipvs: &countingIPVS{Interface: k.ipvs}, cset: &countingIPSet{IPSet: k.ipset}}
	p, err := ipvs.NewProxier(cfg, ipvs.Interfaces{
		IPVS: kp.cipvs, IPSet: kp.cset, Netlink: k.nl, IPTables: k.ipt, Sysctl: ipvskernel.NewSysctl(),
	})
	if err != nil {
		t.Fatal(err)
	}
	kp.p = p
	return kp
}

func (kp *kernelProxier) sync(t *testing.T) {
	t.Helper()
	if err := kp.p.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// kernelDump reads the real state back into the fakes' Dump format.
func (k *kernelEnv) vsTable(t *testing.T) map[string][]string {
	t.Helper()
	vss, err := k.ipvs.GetVirtualServers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, vs := range vss {
		rss, err := k.ipvs.GetRealServers(vs)
		if err != nil {
			t.Fatal(err)
		}
		var l []string
		for _, rs := range rss {
			l = append(l, rs.String()+"/"+string(rune('0'+rs.Weight)))
		}
		slices.Sort(l)
		out[vs.String()+" "+vs.Scheduler] = l
	}
	return out
}

func addDemoServices(p *ipvs.Proxier) {
	p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withAffinity(600)))
	p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	p.OnServiceAdd(service("default", "np", "10.96.0.11", 80, withNodePort(30080), withScheduler("wlc")))
	p.OnEndpointSliceAdd(slice("default", "np", 8080, v1.ProtocolTCP, ready("10.244.1.7", testNode)))
	p.OnServiceAdd(service("kube-system", "dns", "10.96.0.53", 53, withProto(v1.ProtocolUDP)))
	p.OnEndpointSliceAdd(slice("kube-system", "dns", 5353, v1.ProtocolUDP, ready("10.244.1.8", testNode)))
	p.OnServiceAdd(service("default", "lb", "10.96.0.12", 443, withLB(30443, "203.0.113.7", "198.51.100.0/24"), withETPLocal(31000)))
	p.OnEndpointSliceAdd(slice("default", "lb", 8443, v1.ProtocolTCP, ready("10.244.1.9", testNode)))
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
}

func TestKernelProxierRestartAndGraceful(t *testing.T) {
	k := newKernelEnv(t)
	// someone else's virtual servers: one in the excluded CIDR (even bound
	// to kube-ipvs0), one on an address we never bound
	excl := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.99.0.1"), Protocol: v1.ProtocolTCP, Port: 80, Scheduler: "rr"}
	foreign := &ipvs.VirtualServer{Address: netip.MustParseAddr("172.16.0.1"), Protocol: v1.ProtocolTCP, Port: 80, Scheduler: "rr"}
	for _, vs := range []*ipvs.VirtualServer{excl, foreign} {
		if err := k.ipvs.AddVirtualServer(vs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.nl.EnsureDummyDevice(ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	if _, err := k.nl.EnsureAddressBind(excl.Address, ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	cfg := ipvs.Config{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}, StrictARP: true}

	kp := k.proxier(t, cfg)
	addDemoServices(kp.p)
	kp.sync(t)
	table := k.vsTable(t)
	for vs, want := range map[string]string{
		"TCP 10.96.0.10:80 rr":       "10.244.1.5:8080/1 10.244.2.6:8080/1",
		"TCP 10.96.0.11:80 wlc":      "10.244.1.7:8080/1",
		"TCP 192.168.0.10:30080 wlc": "10.244.1.7:8080/1",
		"UDP 10.96.0.53:53 rr":       "10.244.1.8:5353/1",
		"TCP 203.0.113.7:443 rr":     "10.244.1.9:8443/1",
		"TCP 192.168.0.10:30443 rr":  "10.244.1.9:8443/1",
		"TCP 10.99.0.1:80 rr":        "",
		"TCP 172.16.0.1:80 rr":       "",
		"TCP 10.96.0.12:443 rr":      "10.244.1.9:8443/1",
	} {
		got, ok := table[vs]
		if !ok {
			t.Errorf("kernel lacks %s; have %v", vs, table)
			continue
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s real servers = %v, want %s", vs, got, want)
		}
	}
	if len(table) != 9 {
		t.Errorf("kernel has %d virtual servers, want 9: %v", len(table), table)
	}
	if v, err := ipvskernel.NewSysctl().Get("net/ipv4/vs/conntrack"); err != nil || v != 1 {
		t.Errorf("net/ipv4/vs/conntrack = %d, %v", v, err)
	}
	if v, err := ipvskernel.NewSysctl().Get("net/ipv4/conf/all/arp_ignore"); err != nil || v != 1 {
		t.Errorf("arp_ignore = %d, %v", v, err)
	}

	// restart: a new proxier over the same kernel state changes nothing
	kp2 := k.proxier(t, cfg)
	addDemoServices(kp2.p)
	kp2.sync(t)
	if n := kp2.cipvs.mutations.Load() + kp2.cset.mutations.Load(); n != 0 {
		t.Errorf("restart sync made %d IPVS/ipset changes, want 0", n)
	}
	if st := kp2.p.Stats().Last; !st.Full || st.Result.Writes != 0 {
		t.Errorf("restart sync: %+v, want a full sync with no ops", st)
	}

	// an endpoint leaves: with no connections it is deleted at once (TCP
	// goes through weight 0 first); UDP is deleted at once
	kp2.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b")))
	kp2.p.OnEndpointSliceUpdate(nil, slice("kube-system", "dns", 5353, v1.ProtocolUDP))
	kp2.sync(t)
	table = k.vsTable(t)
	if got := strings.Join(table["TCP 10.96.0.10:80 rr"], " "); got != "10.244.2.6:8080/1" {
		t.Errorf("after endpoint removal: %q", got)
	}
	if got := table["UDP 10.96.0.53:53 rr"]; len(got) != 0 {
		t.Errorf("UDP real servers after removal: %v", got)
	}

	// a service goes away: its virtual servers and address go; the
	// excluded and foreign ones stay
	kp2.p.OnServiceDelete(service("default", "np", "10.96.0.11", 80, withNodePort(30080)))
	kp2.sync(t)
	table = k.vsTable(t)
	for _, gone := range []string{"TCP 10.96.0.11:80 wlc", "TCP 192.168.0.10:30080 wlc"} {
		if _, ok := table[gone]; ok {
			t.Errorf("%s still in the kernel", gone)
		}
	}
	for _, kept := range []string{"TCP 10.99.0.1:80 rr", "TCP 172.16.0.1:80 rr"} {
		if _, ok := table[kept]; !ok {
			t.Errorf("%s was deleted", kept)
		}
	}
	addrs, err := k.nl.ListBindAddresses(ipvs.DummyDevice)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a == netip.MustParseAddr("10.96.0.11") {
			t.Error("10.96.0.11 still bound")
		}
	}
	found := false
	for _, a := range addrs {
		found = found || a == excl.Address
	}
	if !found {
		t.Error("excluded address 10.99.0.1 was unbound")
	}

	// a full sync after the changes is a no-op too
	kp3 := k.proxier(t, cfg)
	kp3.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withAffinity(600)))
	kp3.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b")))
	kp3.p.OnServiceAdd(service("kube-system", "dns", "10.96.0.53", 53, withProto(v1.ProtocolUDP)))
	kp3.p.OnServiceAdd(service("default", "lb", "10.96.0.12", 443, withLB(30443, "203.0.113.7", "198.51.100.0/24"), withETPLocal(31000)))
	kp3.p.OnEndpointSliceAdd(slice("default", "lb", 8443, v1.ProtocolTCP, ready("10.244.1.9", testNode)))
	kp3.p.OnServiceSynced()
	kp3.p.OnEndpointSlicesSynced()
	kp3.sync(t)
	if n := kp3.cipvs.deletions.Load() + kp3.cset.deletions.Load(); n != 0 {
		t.Errorf("second restart deleted %d things, want 0", n)
	}
}
