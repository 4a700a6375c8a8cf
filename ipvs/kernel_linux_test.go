//go:build linux

package ipvs_test

import (
	"errors"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
)

// skipUnlessKernel skips unless we are root on a kernel with IPVS (run the
// package with `go test -exec hack/vmtest/vmtest.sh` to get one).
func skipUnlessKernel(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (run through hack/vmtest/vmtest.sh)")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		t.Skip("kernel has no IPVS (/proc/net/ip_vs missing); run through hack/vmtest/vmtest.sh")
	}
}

// inNewNetns moves the test's (locked) thread into a fresh network
// namespace, removed when the test ends.
func inNewNetns(t testing.TB) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore namespace: %v", err)
			return // leave the thread locked: it is in the wrong namespace
		}
		ns.Close()
		orig.Close()
		runtime.UnlockOSThread()
	})
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// kernelEnv is the real interfaces in a fresh namespace with an "eth0"
// (a dummy link) holding the node IP.
type kernelEnv struct {
	ipvs  ipvs.Interface
	ipset ipvs.IPSet
	nl    ipvs.Netlink
	ipt   xtables.Runner
}

func newKernelEnv(t testing.TB) *kernelEnv {
	t.Helper()
	skipUnlessKernel(t)
	inNewNetns(t)
	eth := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}}
	if err := netlink.LinkAdd(eth); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(eth, &netlink.Addr{IPNet: netlink.NewIPNet(nodeIP.AsSlice())}); err != nil {
		t.Fatal(err)
	}
	k := &kernelEnv{}
	var err error
	if k.ipvs, err = ipvskernel.New(ipvskernel.Options{}); err != nil {
		t.Fatal(err)
	}
	if k.ipset, err = ipvskernel.NewIPSet(ipvskernel.Options{}); err != nil {
		t.Fatal(err)
	}
	if k.nl, err = ipvskernel.NewNetlink(ipvskernel.Options{}); err != nil {
		t.Fatal(err)
	}
	if k.ipt, err = xtables.New(xtables.RunnerConfig{Backend: xtables.BackendAuto}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = k.ipvs.Flush()
		_ = k.ipvs.Close()
	})
	return k
}

func TestKernelIPVSInterface(t *testing.T) {
	k := newKernelEnv(t)
	vs := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80, Scheduler: "rr"}
	if err := k.ipvs.AddVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	if err := k.ipvs.AddVirtualServer(vs); !errors.Is(err, ipvs.ErrExists) {
		t.Errorf("second add: %v, want ErrExists", err)
	}
	rs := &ipvs.RealServer{Address: netip.MustParseAddr("10.244.1.5"), Port: 8080, Weight: 1}
	if err := k.ipvs.AddRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	rs.Weight = 0
	if err := k.ipvs.UpdateRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	vs.Flags, vs.Timeout, vs.Scheduler = ipvs.FlagPersistent, 600, "wlc"
	if err := k.ipvs.UpdateVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
	got, err := k.ipvs.GetVirtualServers()
	if err != nil || len(got) != 1 || !got[0].Equal(vs) {
		t.Fatalf("GetVirtualServers = %v, %v; want %v", got, err, vs)
	}
	rss, err := k.ipvs.GetRealServers(vs)
	if err != nil || len(rss) != 1 || rss[0].AddrPort() != rs.AddrPort() || rss[0].Weight != 0 {
		t.Fatalf("GetRealServers = %v, %v", rss, err)
	}
	for _, s := range ipvs.AllSchedulers {
		v := &ipvs.VirtualServer{Address: netip.MustParseAddr("10.96.0.11"), Protocol: v1.ProtocolUDP, Port: 53, Scheduler: s}
		if err := k.ipvs.AddVirtualServer(v); err != nil {
			t.Errorf("scheduler %s: %v", s, err)
			continue
		}
		if err := k.ipvs.DeleteVirtualServer(v); err != nil {
			t.Errorf("delete: %v", err)
		}
	}
	if err := k.ipvs.SetTimeouts(ipvs.Timeouts{TCP: 900 * time.Second, TCPFin: 30 * time.Second, UDP: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	to, err := k.ipvs.GetTimeouts()
	if err != nil || to.TCPFin != 30*time.Second || to.UDP != 60*time.Second {
		t.Errorf("GetTimeouts = %+v, %v", to, err)
	}
	if err := k.ipvs.DeleteRealServer(vs, rs); err != nil {
		t.Fatal(err)
	}
	if err := k.ipvs.DeleteRealServer(vs, rs); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if err := k.ipvs.DeleteVirtualServer(vs); err != nil {
		t.Fatal(err)
	}
}

func TestKernelIPSetInterface(t *testing.T) {
	k := newKernelEnv(t)
	for _, s := range ipvs.Sets(v1.IPv4Protocol) {
		if err := k.ipset.CreateSet(s); err != nil {
			t.Fatalf("create %s: %v", s.Name, err)
		}
		t.Cleanup(func() { _ = k.ipset.DestroySet(s.Name) })
	}
	if err := k.ipset.CreateSet(ipvs.Sets(v1.IPv4Protocol)[0]); !errors.Is(err, ipvs.ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	entries := map[string]ipvs.Entry{
		ipvs.SetClusterIP:              {IP: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80},
		ipvs.SetLoopBack:               {IP: netip.MustParseAddr("10.244.1.5"), Protocol: v1.ProtocolUDP, Port: 53, IP2: netip.MustParseAddr("10.244.1.5")},
		ipvs.SetLoadBalancerSourceCIDR: {IP: netip.MustParseAddr("203.0.113.7"), Protocol: v1.ProtocolTCP, Port: 443, Net: netip.MustParsePrefix("198.51.100.0/24")},
		ipvs.SetNodePortTCP:            {Port: 30080},
		ipvs.SetNodePortSCTP:           {IP: nodeIP, Protocol: v1.ProtocolSCTP, Port: 30900},
		ipvs.SetIPVSIPs:                {IP: netip.MustParseAddr("10.96.0.10")},
	}
	for set, e := range entries {
		if err := k.ipset.AddEntry(set, e); err != nil {
			t.Errorf("add to %s: %v", set, err)
			continue
		}
		if err := k.ipset.AddEntry(set, e); !errors.Is(err, ipvs.ErrExists) {
			t.Errorf("second add to %s: %v, want ErrExists", set, err)
		}
		got, err := k.ipset.ListEntries(set)
		if err != nil || len(got) != 1 || got[0] != e {
			t.Errorf("ListEntries(%s) = %+v, %v; want [%+v]", set, got, err, e)
		}
		if err := k.ipset.DelEntry(set, e); err != nil {
			t.Errorf("del from %s: %v", set, err)
		}
		if err := k.ipset.DelEntry(set, e); !errors.Is(err, ipvs.ErrNotFound) {
			t.Errorf("second del from %s: %v, want ErrNotFound", set, err)
		}
	}
	sets, err := k.ipset.ListSets()
	if err != nil || len(sets) < len(ipvs.Sets(v1.IPv4Protocol)) {
		t.Errorf("ListSets = %d sets, %v", len(sets), err)
	}
}

func TestKernelNetlinkInterface(t *testing.T) {
	k := newKernelEnv(t)
	if existed, err := k.nl.EnsureDummyDevice(ipvs.DummyDevice); err != nil || existed {
		t.Fatalf("EnsureDummyDevice = %v, %v", existed, err)
	}
	if existed, err := k.nl.EnsureDummyDevice(ipvs.DummyDevice); err != nil || !existed {
		t.Fatalf("second EnsureDummyDevice = %v, %v", existed, err)
	}
	a := netip.MustParseAddr("10.96.0.10")
	if existed, err := k.nl.EnsureAddressBind(a, ipvs.DummyDevice); err != nil || existed {
		t.Fatalf("bind = %v, %v", existed, err)
	}
	if existed, err := k.nl.EnsureAddressBind(a, ipvs.DummyDevice); err != nil || !existed {
		t.Fatalf("second bind = %v, %v", existed, err)
	}
	got, err := k.nl.ListBindAddresses(ipvs.DummyDevice)
	if err != nil || !slices.Equal(got, []netip.Addr{a}) {
		t.Fatalf("ListBindAddresses = %v, %v", got, err)
	}
	local, err := k.nl.LocalAddresses(v1.IPv4Protocol, ipvs.DummyDevice)
	if err != nil || !slices.Contains(local, nodeIP) || slices.Contains(local, a) {
		t.Fatalf("LocalAddresses = %v, %v", local, err)
	}
	if err := k.nl.UnbindAddress(a, ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	if err := k.nl.UnbindAddress(a, ipvs.DummyDevice); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("second unbind: %v, want ErrNotFound", err)
	}
	if err := k.nl.DeleteDummyDevice(ipvs.DummyDevice); err != nil {
		t.Fatal(err)
	}
	if err := k.nl.DeleteDummyDevice("lo"); err == nil {
		t.Error("DeleteDummyDevice(lo) succeeded; it must refuse links that are not dummies")
	}
}

func TestKernelProbe(t *testing.T) {
	skipUnlessKernel(t)
	r := ipvskernel.Probe(ipvskernel.ProbeOptions{})
	if !r.Available || r.Version == "" || !r.IPSet {
		t.Fatalf("Probe = %+v", r)
	}
	if err := r.Usable("rr"); err != nil {
		t.Fatal(err)
	}
	if err := r.Usable("nosuch"); err == nil {
		t.Error("Usable(nosuch) = nil")
	}
	t.Logf("Probe: version %s, conn table %d, schedulers %v", r.Version, r.ConnTableSize, r.Schedulers)
}
