package winkernel_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
)

// Dual stack is one proxier per family behind proxy.NewDualStack, each on
// its own HNS view; a dual-stack Service gets an LB in each.
func TestDualStack(t *testing.T) {
	topo4, topo6 := proxytest.DefaultTopology(v1.IPv4Protocol), proxytest.DefaultTopology(v1.IPv6Protocol)
	f4, f6 := newTopoFakes(topo4, winkernel.NetworkOverlay), newTopoFakes(topo6, winkernel.NetworkOverlay)
	p4 := newTopoProxier(t, topo4, f4, nil)
	p6 := newTopoProxier(t, topo6, f6, func(c *winkernel.Config) { c.NodeIPs = []netip.Addr{topo4.NodeIP, topo6.NodeIP} })
	ds, err := proxy.NewDualStack(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	svc := proxytest.MakeService(topo4, "web", topo4.ServiceIP(1), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}, func(s *v1.Service) {
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.ClusterIPs = []string{topo4.ServiceIP(1).String(), topo6.ServiceIP(1).String()}
	})
	ports := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	objs := proxytest.Objects{
		Services: []*v1.Service{svc},
		EndpointSlices: append(
			[]*discovery.EndpointSlice{proxytest.MakeSlice(topo4, "web", "v4", ports, proxytest.EndpointSpec{Pod: topo4.LocalPods[0]})},
			proxytest.MakeSlice(topo6, "web", "v6", ports, proxytest.EndpointSpec{Pod: topo6.LocalPods[0]})),
	}
	feeder := proxytest.NewFeeder(ds)
	if err := feeder.Apply(objs); err != nil {
		t.Fatal(err)
	}
	feeder.Synced()
	if err := ds.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := f4.Dump(); !strings.Contains(d, "lb 10.96.0.1:80/tcp -> 10.244.1.2:8080") {
		t.Errorf("IPv4:\n%s", d)
	}
	if d := f6.Dump(); !strings.Contains(d, "lb [fd00:10:96::1]:80/tcp -> [fd00:10:244:1::2]:8080") || !strings.Contains(d, "flags=ipv6") {
		t.Errorf("IPv6:\n%s", d)
	}
}
