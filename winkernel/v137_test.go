package winkernel_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
)

// kube-proxy v1.37's winkernel load-balancer failure metrics (#137767),
// through the fake HNS: a create refused for a taken port, an update
// refused for an invalid IP, a delete failing otherwise, each counted
// with its family, LB type and error class.
func TestLBFailureMetrics(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	f := newTopoFakes(topo, winkernel.NetworkOverlay)
	m := metrics.New()
	p := newTopoProxier(t, topo, f, func(c *winkernel.Config) { c.Metrics = m })
	feeder := proxytest.NewFeeder(p)
	http := []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}
	ports := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	svc := proxytest.MakeService(topo, "web", topo.ServiceIP(1), http, nil)
	objs := func(pods ...proxytest.Pod) proxytest.Objects {
		var eps []proxytest.EndpointSpec
		for _, pod := range pods {
			eps = append(eps, proxytest.EndpointSpec{Pod: pod})
		}
		return proxytest.Objects{Services: []*v1.Service{svc}, EndpointSlices: []*discovery.EndpointSlice{proxytest.MakeSlice(topo, "web", "1", ports, eps...)}}
	}
	get := func(op, lbType, errType string) float64 {
		switch op {
		case metrics.LBCreate:
			return testutil.ToFloat64(m.WinKernelLBCreateFailuresTotal.WithLabelValues("IPv4", lbType, errType))
		case metrics.LBUpdate:
			return testutil.ToFloat64(m.WinKernelLBUpdateFailuresTotal.WithLabelValues("IPv4", lbType, errType))
		}
		return testutil.ToFloat64(m.WinKernelLBDeleteFailuresTotal.WithLabelValues("IPv4", lbType, errType))
	}

	f.HNS.FailOn("CreateLoadBalancer", 1, fmt.Errorf("injected: %w", winkernel.ErrPortAlreadyExists))
	if err := syncTo(t, feeder, p, objs(topo.LocalPods[0])); err == nil {
		t.Fatal("sync with a refused create succeeded")
	}
	if got := get(metrics.LBCreate, "clusterip", "port_already_exists"); got != 1 {
		t.Errorf("create failures{clusterip,port_already_exists} = %v, want 1", got)
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("sync after the fault: %v", err)
	}

	f.HNS.FailOn("UpdateLoadBalancer", 1, fmt.Errorf("injected: %w", winkernel.ErrInvalidIP))
	if err := syncTo(t, feeder, p, objs(topo.LocalPods[0], topo.LocalPods[1])); err == nil {
		t.Fatal("sync with a refused update succeeded")
	}
	if got := get(metrics.LBUpdate, "clusterip", "invalid_ip"); got != 1 {
		t.Errorf("update failures{clusterip,invalid_ip} = %v, want 1", got)
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("sync after the fault: %v", err)
	}

	f.HNS.FailOn("DeleteLoadBalancer", 1, fmt.Errorf("injected HNS failure"))
	if err := syncTo(t, feeder, p, proxytest.Objects{}); err == nil {
		t.Fatal("sync with a failed delete succeeded")
	}
	if got := get(metrics.LBDelete, "clusterip", "other"); got != 1 {
		t.Errorf("delete failures{clusterip,other} = %v, want 1", got)
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("sync after the fault: %v", err)
	}
	if n := len(f.HNS.LoadBalancers()); n != 0 {
		t.Errorf("%d LBs left after the service went", n)
	}
}

// Upstream's Windows proxy ignores topology (its OnTopologyChange is a
// TODO, kubernetes#137953); this engine selects through the shared
// proxy.CategorizeEndpoints, so node hints (PreferSameNode) and zone hints
// (PreferSameZone, and the deprecated PreferClose) narrow the cluster-IP
// LB's backends as on Linux. (The conformance table's topology-hints
// scenario covers zone hints with the tracer.)
func TestTopologyHintsOnWindows(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	http := []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}
	ports := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	a, b, c := topo.LocalPods[0], topo.RemotePods[0], topo.RemotePods[1]
	for _, tc := range []struct {
		name string
		dist string
		hint func(ep *discovery.Endpoint, pod proxytest.Pod)
		want []proxytest.Pod
	}{{
		name: "PreferSameNode", dist: v1.ServiceTrafficDistributionPreferSameNode,
		hint: func(ep *discovery.Endpoint, pod proxytest.Pod) {
			node := "other-node"
			if pod == a {
				node = topo.NodeName
			}
			ep.Hints = &discovery.EndpointHints{ForNodes: []discovery.ForNode{{Name: node}}, ForZones: []discovery.ForZone{{Name: topo.RemoteZone}}}
		},
		want: []proxytest.Pod{a},
	}, {
		name: "PreferSameZone", dist: v1.ServiceTrafficDistributionPreferSameZone,
		hint: func(ep *discovery.Endpoint, pod proxytest.Pod) {
			zone := topo.RemoteZone
			if pod == a || pod == c {
				zone = topo.Zone
			}
			ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
		},
		want: []proxytest.Pod{a, c},
	}, {
		name: "PreferClose (deprecated alias of PreferSameZone)", dist: v1.ServiceTrafficDistributionPreferClose,
		hint: func(ep *discovery.Endpoint, pod proxytest.Pod) {
			zone := topo.RemoteZone
			if pod == b {
				zone = topo.Zone
			}
			ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}}
		},
		want: []proxytest.Pod{b},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTopoFakes(topo, winkernel.NetworkOverlay)
			p := newTopoProxier(t, topo, f, nil)
			svc := proxytest.MakeService(topo, "web", topo.ServiceIP(1), http, func(s *v1.Service) { s.Spec.TrafficDistribution = &tc.dist })
			sl := proxytest.MakeSlice(topo, "web", "1", ports, proxytest.EndpointSpec{Pod: a}, proxytest.EndpointSpec{Pod: b}, proxytest.EndpointSpec{Pod: c})
			for _, pod := range []proxytest.Pod{a, b, c} {
				for j := range sl.Endpoints {
					if sl.Endpoints[j].Addresses[0] == pod.IP.String() {
						tc.hint(&sl.Endpoints[j], pod)
					}
				}
			}
			objs := proxytest.Objects{Services: []*v1.Service{svc}, EndpointSlices: []*discovery.EndpointSlice{sl}, Node: proxytest.MakeNode(topo, topo.Zone)}
			mustSync(t, proxytest.NewFeeder(p), p, objs)
			var got []string
			for _, line := range strings.Split(f.Dump(), "\n") {
				if strings.Contains(line, "lb "+netip.AddrPortFrom(topo.ServiceIP(1), 80).String()+"/tcp") {
					got = append(got, line)
				}
			}
			if len(got) != 1 {
				t.Fatalf("cluster-IP LB lines %q in:\n%s", got, f.Dump())
			}
			for _, pod := range []proxytest.Pod{a, b, c} {
				in := strings.Contains(got[0], netip.AddrPortFrom(pod.IP, 8080).String())
				want := false
				for _, w := range tc.want {
					want = want || w == pod
				}
				if in != want {
					t.Errorf("backend %s in the LB: %v, want %v\n%s", pod.IP, in, want, got[0])
				}
			}
		})
	}
}

// Dual stack on one host: the IPv4 and IPv6 engines share one HNS, each
// tracking its own family's LBs (kube-proxy v1.37 fixed its winkernel to
// do so, #136373 and #136241). A full resync of either family must neither
// delete nor rewrite the other family's LBs, and a change to one family's
// endpoints touches only that family's LB.
func TestDualStackSharedHNS(t *testing.T) {
	topo4, topo6 := proxytest.DefaultTopology(v1.IPv4Protocol), proxytest.DefaultTopology(v1.IPv6Protocol)
	f := newTopoFakes(topo4, winkernel.NetworkOverlay)
	for _, pod := range append(append([]proxytest.Pod{}, topo6.LocalPods...), topo6.ClientPod) {
		f.AddPod(pod.Name+"-v6", pod.IP)
	}
	f.AddPod("cbr0-v6", topo6.PodGateway)
	p4 := newTopoProxier(t, topo4, f, nil)
	p6 := newTopoProxier(t, topo6, f, func(c *winkernel.Config) { c.NodeIPs = []netip.Addr{topo4.NodeIP, topo6.NodeIP} })
	ds, err := proxy.NewDualStack(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	svc := proxytest.MakeService(topo4, "web", topo4.ServiceIP(1), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080, NodePort: 30080}}, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.ClusterIPs = []string{topo4.ServiceIP(1).String(), topo6.ServiceIP(1).String()}
	})
	ports := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	objs := func(v4 ...proxytest.Pod) proxytest.Objects {
		var eps []proxytest.EndpointSpec
		for _, p := range v4 {
			eps = append(eps, proxytest.EndpointSpec{Pod: p})
		}
		return proxytest.Objects{
			Services: []*v1.Service{svc},
			EndpointSlices: []*discovery.EndpointSlice{
				proxytest.MakeSlice(topo4, "web", "v4", ports, eps...),
				proxytest.MakeSlice(topo6, "web", "v6", ports, proxytest.EndpointSpec{Pod: topo6.LocalPods[0]}),
			},
		}
	}
	feeder := proxytest.NewFeeder(ds)
	sync := func(o proxytest.Objects) {
		t.Helper()
		if err := feeder.Apply(o); err != nil {
			t.Fatal(err)
		}
		feeder.Synced()
		if err := ds.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync(objs(topo4.LocalPods[0]))
	before := f.Dump()
	for _, want := range []string{"lb 10.96.0.1:80/tcp -> 10.244.1.2:8080", "lb [fd00:10:96::1]:80/tcp -> [fd00:10:244:1::2]:8080"} {
		if !strings.Contains(before, want) {
			t.Fatalf("no %q in:\n%s", want, before)
		}
	}
	if n := strings.Count(before, "\nlb *:30080/tcp"); n != 2 {
		t.Errorf("%d node-port LBs for 30080, want one per family:\n%s", n, before)
	}

	// Full resyncs of both, in either order: nothing written.
	f.HNS.ResetCalls()
	p4.RequestFullSync()
	p6.RequestFullSync()
	sync(objs(topo4.LocalPods[0]))
	if w := f.HNS.CallsOf("CreateLoadBalancer", "UpdateLoadBalancer", "DeleteLoadBalancer"); w != 0 {
		t.Errorf("full resyncs of an unchanged dual-stack service made %d LB writes", w)
	}
	if got := f.Dump(); got != before {
		t.Errorf("full resyncs changed HNS:\n%s\nwant\n%s", got, before)
	}

	// An IPv4 endpoint change: IPv4 LBs updated in place, IPv6 ones untouched.
	f.HNS.ResetCalls()
	sync(objs(topo4.LocalPods[0], topo4.LocalPods[1]))
	if c, d := f.HNS.CallsOf("CreateLoadBalancer"), f.HNS.CallsOf("DeleteLoadBalancer"); c != 0 || d != 0 {
		t.Errorf("an endpoint change created %d and deleted %d LBs; want updates in place", c, d)
	}
	after := f.Dump()
	for _, line := range strings.Split(before, "\n") {
		if strings.Contains(line, "fd00:") && strings.HasPrefix(strings.TrimSpace(line), "lb ") && !strings.Contains(after, line) {
			t.Errorf("IPv6 LB changed by an IPv4 endpoint change: %s", line)
		}
	}
}
