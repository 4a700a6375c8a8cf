//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// cluster is a synthetic cluster as the benchmarks' workload: n services
// with eps endpoints each in one slice, every 10th a NodePort.
type cluster struct {
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

func makeCluster(n, eps int) *cluster {
	c := &cluster{}
	for i := 0; i < n; i++ {
		c.services = append(c.services, makeService(i))
		c.slices = append(c.slices, makeSlice(i, eps, 0))
	}
	return c
}

func makeService(i int) *v1.Service {
	name := fmt.Sprintf("svc-%d", i)
	ip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []v1.ServicePort{{Name: "p80", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	if i%10 == 0 {
		svc.Spec.Type = v1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = int32(30000 + i/10)
	}
	return svc
}

// makeSlice: endpoints 10.{128+i/256%64}.{i%256}.{j+gen}.
func makeSlice(i, eps, gen int) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("svc-%d-1", i),
			Labels: map[string]string{discovery.LabelServiceName: fmt.Sprintf("svc-%d", i)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("p80"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for j := 0; j < eps; j++ {
		ip := netip.AddrFrom4([4]byte{10, byte(128 + (i>>8)%64), byte(i), byte(1 + (j+gen)%250)})
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses:  []string{ip.String()},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To("node-b"),
		})
	}
	return sl
}

func (c *cluster) feed(p *nftables.Proxier) {
	for _, s := range c.services {
		p.OnServiceAdd(s)
	}
	for _, s := range c.slices {
		p.OnEndpointSliceAdd(s)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
}

func testConfig() nftables.Config {
	return nftables.Config{
		Common: engine.Common{
			NodeName: "node-a",
			NodeIPs:  []netip.Addr{netip.MustParseAddr("192.168.50.10")},
		},
		Netfilter: engine.Netfilter{
			LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.128.0.0/10")},
		},
	}
}

func newTestProxier(t testing.TB, fakes *nftablestest.Fakes, cfg nftables.Config) *nftables.Proxier {
	t.Helper()
	p, err := nftables.NewProxier(cfg, fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSync(t testing.TB, p *nftables.Proxier) engine.SyncOutcome {
	t.Helper()
	if err := p.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p.Stats().Last
}
