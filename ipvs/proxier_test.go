package ipvs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

var errBoom = errors.New("netlink: boom")

func TestSyncBeforeSyncedTouchesNothing(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80))
	if err := e.p.Sync(context.Background()); !errors.Is(err, proxy.ErrNotSynced) {
		t.Fatalf("Sync = %v, want ErrNotSynced", err)
	}
	if n := e.mutations(); n != 0 {
		t.Errorf("%d changes before synced", n)
	}
}

func TestSysctlsAndTimeouts(t *testing.T) {
	e := newEnv(t, ipvs.Config{StrictARP: true, ConnReuseMode: new(int), TCPTimeout: 7200 * time.Second, UDPTimeout: 60 * time.Second})
	e.synced()
	e.sync(t)
	want := "net/ipv4/conf/all/arp_announce = 2\nnet/ipv4/conf/all/arp_ignore = 1\nnet/ipv4/ip_forward = 1\n" +
		"net/ipv4/vs/conn_reuse_mode = 0\nnet/ipv4/vs/conntrack = 1\nnet/ipv4/vs/expire_nodest_conn = 1\nnet/ipv4/vs/expire_quiescent_template = 1\n"
	if got := e.sysctl.Dump(); got != want {
		t.Errorf("sysctls:\n%s\nwant:\n%s", got, want)
	}
	to, _ := e.ipvs.GetTimeouts()
	if to.TCP != 7200*time.Second || to.UDP != 60*time.Second || to.TCPFin != 120*time.Second {
		t.Errorf("timeouts = %+v", to)
	}
}

// manyServices adds n ClusterIP services with two endpoints each (every
// tenth a NodePort).
func manyServices(e *env, n int) {
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		opts := []svcOpt{}
		if i%10 == 0 {
			opts = append(opts, withNodePort(int32(30000+i)))
		}
		e.p.OnServiceAdd(service("default", name, ip, 80, opts...))
		e.p.OnEndpointSliceAdd(slice("default", name, 8080, v1.ProtocolTCP,
			ready(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), testNode), ready(fmt.Sprintf("10.245.%d.%d", i/250, i%250+1), "node-b")))
	}
}

func TestRestartIssuesNoChanges(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	manyServices(e, 40)
	e.synced()
	e.sync(t)
	before := e.dump()
	e.resetCalls()
	e.withProxier(t, e.cfg) // restart over the same kernel state
	manyServices(e, 40)
	e.synced()
	e.sync(t)
	if n := e.mutations(); n != 0 {
		t.Errorf("restart made %d changes (IPVS %v, ipset %v, netlink %v), want 0", n, e.ipvs.Calls(), e.ipset.Calls(), e.nl.Calls())
	}
	if e.dump() != before {
		t.Errorf("state changed across a restart:\n%s", lineDiff(before, e.dump()))
	}
	// the restarted proxier then works incrementally
	e.p.OnServiceDelete(service("default", "svc-3", "10.96.0.4", 80))
	e.sync(t)
	// the virtual server, the address, and three set entries (cluster IP,
	// KUBE-IPVS-IPS, the local endpoint in KUBE-LOOP-BACK)
	if st := e.last(); st.Full || st.Result.Writes != 5 {
		t.Errorf("delete after restart: %+v, want a partial sync of 5 ops", st)
	}
	if e.ipvs.Deletions() != 1 {
		t.Errorf("deletions: %v", e.ipvs.Calls())
	}
}

func TestPartialSyncIsProportionalToChange(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	manyServices(e, 100)
	e.synced()
	e.sync(t)
	e.resetCalls()
	// one endpoint replaced in one ClusterIP service
	e.p.OnEndpointSliceUpdate(nil, slice("default", "svc-7", 8080, v1.ProtocolTCP, ready("10.244.0.8", testNode), ready("10.245.9.9", "node-b")))
	e.sync(t)
	st := e.last()
	if st.Full {
		t.Fatal("sync after one change was full")
	}
	// add the new real server, drain the old one (weight 0; no connections:
	// deleted in the same sync)
	c := e.ipvs.Calls()
	if c["AddRealServer"] != 1 || c["UpdateRealServer"] != 1 || c["DeleteRealServer"] != 1 || c["GetVirtualServers"] != 0 {
		t.Errorf("IPVS calls %v", c)
	}
	if e.ipset.Mutations() != 0 || e.nl.Mutations() != 0 {
		t.Errorf("ipset %v, netlink %v: want no changes", e.ipset.Calls(), e.nl.Calls())
	}
}

func TestSchedulerAnnotation(t *testing.T) {
	e := newEnv(t, ipvs.Config{Scheduler: "wlc"})
	e.p.OnServiceAdd(service("default", "a", "10.96.0.1", 80, withScheduler("sh")))
	e.p.OnServiceAdd(service("default", "b", "10.96.0.2", 80, withScheduler("bogus")))
	e.p.OnServiceAdd(service("default", "c", "10.96.0.3", 80))
	e.synced()
	e.sync(t)
	for addr, want := range map[string]string{"10.96.0.1": "sh", "10.96.0.2": "wlc", "10.96.0.3": "wlc"} {
		vs, _, ok := e.ipvs.Lookup(ipvs.VirtualServerKey{Address: netip.MustParseAddr(addr), Protocol: v1.ProtocolTCP, Port: 80})
		if !ok || vs.Scheduler != want {
			t.Errorf("%s: %v, want scheduler %s", addr, vs, want)
		}
	}
	// changing the annotation updates the virtual server in place
	e.resetCalls()
	e.p.OnServiceUpdate(nil, service("default", "c", "10.96.0.3", 80, withScheduler("mh")))
	e.sync(t)
	if c := e.ipvs.Calls(); c["UpdateVirtualServer"] != 1 || e.ipvs.Deletions() != 0 {
		t.Errorf("calls %v", c)
	}
}

func TestGracefulTermination(t *testing.T) {
	e := newEnv(t, ipvs.Config{GracefulTerminationPeriod: time.Minute})
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.synced()
	e.sync(t)
	key := ipvs.VirtualServerKey{Address: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80}
	gone := netip.MustParseAddrPort("10.244.2.6:8080")
	if err := e.ipvs.SetConnections(key, gone, 3, 1); err != nil {
		t.Fatal(err)
	}
	weight := func() int {
		_, rss, _ := e.ipvs.Lookup(key)
		for _, rs := range rss {
			if rs.AddrPort() == gone {
				return rs.Weight
			}
		}
		return -1
	}
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	e.sync(t)
	if w := weight(); w != 0 {
		t.Fatalf("removed real server with connections: weight %d, want 0 (draining)", w)
	}
	if n := e.draining(); n != 1 {
		t.Errorf("draining = %d", n)
	}
	// it comes back before draining ends: weight 1 again
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.sync(t)
	if w := weight(); w != 1 {
		t.Fatalf("returned real server: weight %d, want 1", w)
	}
	// removed again; connections end: deleted at the next sync
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	e.sync(t)
	if w := weight(); w != 0 {
		t.Fatalf("weight %d, want 0", w)
	}
	e.sync(t)
	if w := weight(); w != 0 {
		t.Fatalf("still connected: weight %d, want 0", w)
	}
	_ = e.ipvs.SetConnections(key, gone, 0, 0)
	e.sync(t)
	if w := weight(); w != -1 {
		t.Fatalf("drained real server still there (weight %d)", w)
	}
	// the period bounds draining
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b")))
	e.sync(t)
	stuck := netip.MustParseAddrPort("10.244.1.5:8080")
	_ = e.ipvs.SetConnections(key, stuck, 5, 5)
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b"), ready("10.244.3.3", "node-c")))
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b")))
	e.sync(t)
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.sync(t)
	_ = e.ipvs.SetConnections(key, stuck, 5, 5)
	e.p.OnEndpointSliceUpdate(nil, slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.2.6", "node-b")))
	e.sync(t)
	_, rss, _ := e.ipvs.Lookup(key)
	if len(rss) != 2 {
		t.Fatalf("want the stuck real server draining: %v", rss)
	}
	e.clock.Step(2 * time.Minute)
	e.sync(t)
	_, rss, _ = e.ipvs.Lookup(key)
	if len(rss) != 1 || rss[0].AddrPort() != gone {
		t.Errorf("after the period: %v, want only %s", rss, gone)
	}
}

func TestUDPRealServersGoAtOnce(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	e.p.OnServiceAdd(service("kube-system", "dns", "10.96.0.53", 53, withProto(v1.ProtocolUDP)))
	e.p.OnEndpointSliceAdd(slice("kube-system", "dns", 53, v1.ProtocolUDP, ready("10.244.1.5", testNode), ready("10.244.2.6", "node-b")))
	e.synced()
	e.sync(t)
	key := ipvs.VirtualServerKey{Address: netip.MustParseAddr("10.96.0.53"), Protocol: v1.ProtocolUDP, Port: 53}
	_ = e.ipvs.SetConnections(key, netip.MustParseAddrPort("10.244.2.6:53"), 0, 9)
	e.p.OnEndpointSliceUpdate(nil, slice("kube-system", "dns", 53, v1.ProtocolUDP, ready("10.244.1.5", testNode)))
	e.sync(t)
	_, rss, _ := e.ipvs.Lookup(key)
	if len(rss) != 1 {
		t.Errorf("UDP real servers %v, want one", rss)
	}
	if e.ct.calls == 0 {
		t.Error("no conntrack cleanup for the removed UDP real server")
	}
}

func TestExcludedAndForeignStateIsLeftAlone(t *testing.T) {
	e := newEnv(t, ipvs.Config{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}})
	if err := e.ipvs.Load(`
TCP  10.99.0.1:80 rr
  -> 10.1.1.1:80 Masq 1 0 0
TCP  172.16.0.1:443 wrr
TCP  192.168.0.10:31111 rr
TCP  10.96.5.5:80 rr
  -> 10.1.1.2:80 Masq 1 0 0
`); err != nil {
		t.Fatal(err)
	}
	_, _ = e.nl.EnsureDummyDevice(ipvs.DummyDevice)
	for _, a := range []string{"10.99.0.1", "10.96.5.5"} {
		_, _ = e.nl.EnsureAddressBind(netip.MustParseAddr(a), ipvs.DummyDevice)
	}
	e.synced()
	e.sync(t)
	d := e.ipvs.Dump()
	for _, kept := range []string{"10.99.0.1:80", "172.16.0.1:443", "192.168.0.10:31111"} {
		if !strings.Contains(d, kept) {
			t.Errorf("%s was deleted:\n%s", kept, d)
		}
	}
	if strings.Contains(d, "10.96.5.5:80") {
		t.Errorf("stale virtual server on a kube-ipvs0 address survived:\n%s", d)
	}
	if got := e.nl.Dump(ipvs.DummyDevice); !strings.Contains(got, "10.99.0.1/32") || strings.Contains(got, "10.96.5.5") {
		t.Errorf("kube-ipvs0:\n%s", got)
	}
}

func TestFaultsKeepStateAndNextSyncConverges(t *testing.T) {
	for _, method := range []string{"AddVirtualServer", "AddRealServer", "EnsureAddressBind", "AddEntry", "UpdateRealServer", "DeleteVirtualServer", "GetVirtualServers", "ListEntries", "Restore", "EnsureDummyDevice"} {
		t.Run(method, func(t *testing.T) {
			e := newEnv(t, ipvs.Config{})
			manyServices(e, 12)
			e.synced()
			e.sync(t)
			// a change, with one kernel call failing mid-sync
			e.p.OnServiceDelete(service("default", "svc-1", "10.96.0.2", 80))
			e.p.OnServiceAdd(service("default", "new", "10.96.9.9", 80, withNodePort(31999)))
			e.p.OnEndpointSliceAdd(slice("default", "new", 8080, v1.ProtocolTCP, ready("10.244.9.9", testNode)))
			e.p.OnEndpointSliceUpdate(nil, slice("default", "svc-2", 8080, v1.ProtocolTCP, ready("10.244.7.7", testNode)))
			inject(e, method)
			if method == "GetVirtualServers" || method == "ListEntries" || method == "Restore" || method == "EnsureDummyDevice" {
				// these happen only in full syncs: make this one full
				e.clock.Step(time.Hour)
			}
			err := e.p.Sync(context.Background())
			if err == nil {
				t.Fatalf("Sync with a failing %s returned nil", method)
			}
			heal(e)
			e.sync(t)
			if !e.last().Full {
				t.Error("the sync after a failure was not full")
			}
			fresh := newEnv(t, ipvs.Config{})
			manyServices(fresh, 12)
			fresh.p.OnServiceDelete(service("default", "svc-1", "10.96.0.2", 80))
			fresh.p.OnServiceAdd(service("default", "new", "10.96.9.9", 80, withNodePort(31999)))
			fresh.p.OnEndpointSliceAdd(slice("default", "new", 8080, v1.ProtocolTCP, ready("10.244.9.9", testNode)))
			fresh.p.OnEndpointSliceUpdate(nil, slice("default", "svc-2", 8080, v1.ProtocolTCP, ready("10.244.7.7", testNode)))
			fresh.synced()
			fresh.sync(t)
			if got, want := e.dump(), fresh.dump(); got != want {
				t.Errorf("after recovery the state differs from a fresh sync:\n%s", lineDiff(want, got))
			}
		})
	}
}

func inject(e *env, method string) {
	switch method {
	case "EnsureAddressBind", "EnsureDummyDevice":
		e.nl.FailOn(method, 1, errBoom)
	case "AddEntry", "ListEntries":
		e.ipset.FailOn(method, 1, errBoom)
	case "Restore":
		e.ipt.FailOn(method, 1, errBoom)
	default:
		e.ipvs.FailOn(method, 1, errBoom)
	}
}

func heal(e *env) { e.f.Heal() }

// walkState is one desired state of the random walk.
type walkState struct {
	name     string
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

func walkStates() []walkState {
	tcp := v1.ProtocolTCP
	return []walkState{
		{name: "empty"},
		{name: "one", services: []*v1.Service{service("d", "a", "10.96.0.1", 80)},
			slices: []*discovery.EndpointSlice{slice("d", "a", 8080, tcp, ready("10.244.1.1", testNode))}},
		{name: "two-eps-affinity", services: []*v1.Service{service("d", "a", "10.96.0.1", 80, withAffinity(30))},
			slices: []*discovery.EndpointSlice{slice("d", "a", 8080, tcp, ready("10.244.1.1", testNode), ready("10.244.2.1", "node-b"))}},
		{name: "nodeport-lb", services: []*v1.Service{
			service("d", "a", "10.96.0.1", 80, withNodePort(30001)),
			service("d", "b", "10.96.0.2", 443, withLB(30002, "203.0.113.9", "198.51.100.0/24"), withETPLocal(31002)),
		}, slices: []*discovery.EndpointSlice{
			slice("d", "a", 8080, tcp, ready("10.244.2.1", "node-b")),
			slice("d", "b", 8443, tcp, ready("10.244.1.2", testNode), ready("10.244.2.2", "node-b")),
		}},
		{name: "shared-ip-external", services: []*v1.Service{
			service("d", "a", "10.96.0.1", 80, withExternalIPs("198.51.100.5"), withScheduler("lc")),
			service("d", "c", "10.96.0.3", 53, withProto(v1.ProtocolUDP), withExternalIPs("198.51.100.5")),
		}, slices: []*discovery.EndpointSlice{
			slice("d", "a", 8080, tcp, ready("10.244.1.1", testNode)),
			slice("d", "c", 53, v1.ProtocolUDP, ready("10.244.1.1", testNode), ready("10.244.2.9", "node-b")),
		}},
		{name: "no-endpoints", services: []*v1.Service{service("d", "a", "10.96.0.1", 80), service("d", "b", "10.96.0.2", 443, withNodePort(30002))}},
	}
}

func apply(e *env, from, to walkState) {
	for _, s := range from.services {
		e.p.OnServiceDelete(s)
	}
	for _, s := range from.slices {
		e.p.OnEndpointSliceDelete(s)
	}
	for _, s := range to.services {
		e.p.OnServiceAdd(s)
	}
	for _, s := range to.slices {
		e.p.OnEndpointSliceAdd(s)
	}
}

// TestStateWalk walks the states in random orders with partial syncs and
// checks that each reached state equals a fresh full sync of it.
func TestStateWalk(t *testing.T) {
	states := walkStates()
	want := map[string]string{}
	for _, s := range states {
		f := newEnv(t, ipvs.Config{})
		apply(f, walkState{}, s)
		f.synced()
		f.sync(t)
		want[s.name] = f.dump()
	}
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 8; round++ {
		e := newEnv(t, ipvs.Config{})
		e.synced()
		e.sync(t)
		cur := states[0]
		order := rng.Perm(len(states))
		order = append(order, rng.Perm(len(states))...)
		for _, i := range order {
			next := states[i]
			apply(e, cur, next)
			e.sync(t)
			if e.last().Full {
				t.Fatalf("round %d: %s -> %s was a full sync", round, cur.name, next.name)
			}
			if got := e.dump(); got != want[next.name] {
				t.Fatalf("round %d: %s -> %s differs from a fresh sync:\n%s", round, cur.name, next.name, lineDiff(want[next.name], got))
			}
			cur = next
		}
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withAffinity(60)))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	e.synced()
	out, err := e.p.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ipvsadm -A -t 10.96.0.10:80 -s rr -p 60",
		"ipvsadm -a -t 10.96.0.10:80 -r 10.244.1.5:8080 -m -w 1",
		"ip addr add 10.96.0.10/32 dev kube-ipvs0",
		"ipset create KUBE-CLUSTER-IP hash:ip,port family inet",
		"ipset add KUBE-CLUSTER-IP 10.96.0.10,tcp:80",
		"-A KUBE-SERVICES",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if e.mutations() != 0 {
		t.Errorf("dry run changed things: %v %v %v", e.ipvs.Calls(), e.ipset.Calls(), e.nl.Calls())
	}
	e.sync(t)
	if !e.last().Full || e.last().Result.Writes == 0 {
		t.Errorf("sync after dry run: %+v", e.last())
	}
}

func TestCleanup(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	_ = e.ipvs.Load("TCP 172.16.0.1:443 rr\n")
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80, withNodePort(30080)))
	e.synced()
	e.sync(t)
	if err := e.p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.ipvs.Dump(); !strings.Contains(got, "172.16.0.1:443") || strings.Contains(got, "10.96.0.10") || strings.Contains(got, "30080") {
		t.Errorf("IPVS after cleanup:\n%s", got)
	}
	if got := e.ipset.Dump(); got != "" {
		t.Errorf("ipsets after cleanup:\n%s", got)
	}
	if got := e.nl.Dump(ipvs.DummyDevice); !strings.Contains(got, "does not exist") {
		t.Errorf("kube-ipvs0 after cleanup:\n%s", got)
	}
	if got := e.ipt.Dump(); strings.Contains(got, "KUBE-") {
		t.Errorf("iptables after cleanup:\n%s", got)
	}
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	ifs := e.f.Interfaces()
	for name, cfg := range map[string]ipvs.Config{
		"scheduler":     {Scheduler: "fastest"},
		"family":        config(engine.Common{IPFamily: "IPv5"}),
		"masq bit":      {Netfilter: engine.Netfilter{MasqueradeBit: 40}},
		"detector cidr": {Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR}}},
		"runner family": config(engine.Common{IPFamily: v1.IPv6Protocol}),
	} {
		if _, err := ipvs.NewProxier(cfg, ifs); err == nil {
			t.Errorf("%s: NewProxier accepted %+v", name, cfg)
		}
	}
	if _, err := ipvs.NewProxier(ipvs.Config{}, ipvs.Interfaces{}); err == nil {
		t.Error("NewProxier accepted missing interfaces")
	}
}

// TestMasqueradeBitZero: -1 asks for fwmark bit 0 (0 means the default 14),
// as in iptables.Config, so every bit kube-proxy accepts can be chosen.
func TestMasqueradeBitZero(t *testing.T) {
	for _, tc := range []struct {
		bit  int
		mark string
	}{{0, "0x4000"}, {-1, "0x1"}, {31, "0x80000000"}} {
		e := newEnv(t, ipvs.Config{Netfilter: engine.Netfilter{MasqueradeBit: tc.bit}})
		e.p.OnServiceSynced()
		e.p.OnEndpointSlicesSynced()
		e.sync(t)
		if want := "-A KUBE-MARK-MASQ -j MARK --set-xmark " + tc.mark + "/" + tc.mark; !strings.Contains(e.ipt.Dump(), want) {
			t.Errorf("MasqueradeBit %d: no %q in\n%s", tc.bit, want, e.ipt.Dump())
		}
	}
	e := newEnv(t, ipvs.Config{})
	if _, err := ipvs.NewProxier(ipvs.Config{Netfilter: engine.Netfilter{MasqueradeBit: -2}}, e.f.Interfaces()); err == nil {
		t.Error("NewProxier accepted MasqueradeBit -2")
	}
}

// TestDryRunIsPure: a dry run over a node with a real server draining
// since before a restart shows its adoption and its deletion as ops, reads
// only, and leaves the proxier as it was: a second dry run prints the
// same, and the sync after it adopts and drains the real server.
func TestDryRunIsPure(t *testing.T) {
	e := newEnv(t, ipvs.Config{})
	if err := e.ipvs.Load(`
TCP  10.96.0.10:80 rr
  -> 10.244.1.5:8080 Masq 1 0 0
  -> 10.244.2.6:8080 Masq 0 1 0
`); err != nil {
		t.Fatal(err)
	}
	e.resetCalls()
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	e.synced()
	first, err := e.p.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# draining (weight 0): -t 10.96.0.10:80 -r 10.244.2.6:8080\n",
		"ipvsadm -d -t 10.96.0.10:80 -r 10.244.2.6:8080 # once its connections end\n",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("dry run lacks %q:\n%s", want, first)
		}
	}
	second, err := e.p.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("a second dry run differs:\n%s", lineDiff(first, second))
	}
	if n := e.mutations(); n != 0 {
		t.Errorf("dry runs made %d changes", n)
	}
	key := ipvs.VirtualServerKey{Address: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80}
	e.sync(t)
	if _, rss, _ := e.ipvs.Lookup(key); len(rss) != 2 || e.last().Result.RequeueAfter != 5*time.Second {
		t.Fatalf("draining real server with a connection: %v, requeue %v; want it kept and a requeue in 5s", rss, e.last().Result.RequeueAfter)
	}
	_ = e.ipvs.SetConnections(key, netip.MustParseAddrPort("10.244.2.6:8080"), 0, 0)
	e.sync(t) // partial: nothing changed but the drain
	if _, rss, _ := e.ipvs.Lookup(key); len(rss) != 1 || e.last().Full || e.last().Result.RequeueAfter != 0 {
		t.Errorf("drained real server: %v, last sync %+v; want it deleted by a partial sync, no requeue", rss, e.last())
	}
}
