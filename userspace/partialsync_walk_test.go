package userspace_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
	"github.com/svcproxy/svcproxy/userspace"
)

// walkPorts are the ports a walked service may have.
var walkPorts = []struct {
	name  string
	port  int32
	proto v1.Protocol
}{{"http", 80, v1.ProtocolTCP}, {"https", 443, v1.ProtocolTCP}, {"dns", 53, v1.ProtocolUDP}, {"sctp", 9, v1.ProtocolSCTP}}

// walkService is one service's randomly chosen state.
type walkService struct {
	ports          []int  // indexes into walkPorts; none: the service does not exist
	internalLocal  bool   // internalTrafficPolicy: Local
	externalLocal  bool   // externalTrafficPolicy: Local (with an external IP)
	endpointsNodes []bool // one endpoint per entry, true: on this node
	outOfScope     []bool // per endpoint: outside the EndpointFilter
}

func (w walkService) objects(i int) (*v1.Service, *discovery.EndpointSlice) {
	name := fmt.Sprintf("s%d", i)
	if len(w.ports) == 0 {
		return nil, nil
	}
	ip := fmt.Sprintf("10.96.0.%d", 10+i)
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			ExternalIPs: []string{fmt.Sprintf("198.51.100.%d", 10+i)}}}
	if w.internalLocal {
		svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
	}
	if w.externalLocal {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	sl := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: discovery.AddressTypeIPv4,
	}
	for _, pi := range w.ports {
		p := walkPorts[pi]
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: p.name, Port: p.port, Protocol: p.proto, TargetPort: intstr.FromString(p.name)})
		sl.Ports = append(sl.Ports, discovery.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(8000 + p.port), Protocol: ptr.To(p.proto)})
	}
	for e, local := range w.endpointsNodes {
		node, net := "node-b", byte(244)
		if local {
			node = "node-a"
		}
		if w.outOfScope[e] {
			net = 99
		}
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses:  []string{netip.AddrFrom4([4]byte{10, net, byte(i), byte(e + 2)}).String()},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
			NodeName:   ptr.To(node),
		})
	}
	return svc, sl
}

func randomWalkService(rng *rand.Rand) walkService {
	var w walkService
	for pi := range walkPorts {
		if rng.IntN(2) == 0 {
			w.ports = append(w.ports, pi)
		}
	}
	w.internalLocal, w.externalLocal = rng.IntN(3) == 0, rng.IntN(3) == 0
	for range rng.IntN(3) {
		w.endpointsNodes = append(w.endpointsNodes, rng.IntN(2) == 0)
		w.outOfScope = append(w.outOfScope, rng.IntN(4) == 0)
	}
	return w
}

// TestPartialSyncWalk changes one service at a time (ports added and
// removed, traffic policies, endpoints local or not, in or out of the
// EndpointFilter's scope), with now and then a node topology change, and
// checks after each sync that the walked proxier, which syncs partially,
// programmed what a fresh proxier programs from the same objects and
// reports the same no-local-endpoint metrics.
func TestPartialSyncWalk(t *testing.T) {
	filter := proxy.EndpointFilter{IncludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	newProxier := func() (*userspace.Proxier, *xtablestest.Fake, *metrics.Metrics) {
		fake := xtablestest.NewFake(v1.IPv4Protocol)
		m := metrics.New()
		p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", Metrics: m, EndpointFilter: filter},
			HostIP: netip.MustParseAddr("192.168.50.10")}, userspace.Interfaces{IPTables: fake})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.OnServiceSynced()
		p.OnEndpointSlicesSynced()
		return p, fake, m
	}
	noLocal := func(m *metrics.Metrics) string {
		return fmt.Sprintf("internal=%v external=%v",
			testutil.ToFloat64(m.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyInternal, "IPv4")),
			testutil.ToFloat64(m.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyExternal, "IPv4")))
	}
	node := func(zone string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{v1.LabelTopologyZone: zone}}}
	}

	const services = 4
	state := make([]walkService, services)
	zone := "z0"
	walker, walkerFake, walkerMetrics := newProxier()
	walker.OnNodeAdd(node(zone))
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 150 {
		if rng.IntN(15) == 0 {
			old := node(zone)
			zone = fmt.Sprintf("z%d", step)
			walker.OnNodeUpdate(old, node(zone))
		} else {
			i := rng.IntN(services)
			oldSvc, oldSlice := state[i].objects(i)
			state[i] = randomWalkService(rng)
			newSvc, newSlice := state[i].objects(i)
			switch {
			case oldSvc == nil && newSvc != nil:
				walker.OnServiceAdd(newSvc)
				walker.OnEndpointSliceAdd(newSlice)
			case oldSvc != nil && newSvc == nil:
				walker.OnServiceDelete(oldSvc)
				walker.OnEndpointSliceDelete(oldSlice)
			case oldSvc != nil:
				walker.OnServiceUpdate(oldSvc, newSvc)
				walker.OnEndpointSliceUpdate(oldSlice, newSlice)
			}
		}
		if err := walker.Sync(context.Background()); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}

		fresh, freshFake, freshMetrics := newProxier()
		fresh.OnNodeAdd(node(zone))
		for i := range services {
			if svc, sl := state[i].objects(i); svc != nil {
				fresh.OnServiceAdd(svc)
				fresh.OnEndpointSliceAdd(sl)
			}
		}
		if err := fresh.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, want := canonical(t, walker, walkerFake), canonical(t, fresh, freshFake)
		gotM, wantM := noLocal(walkerMetrics), noLocal(freshMetrics)
		fresh.Close()
		if got != want {
			t.Fatalf("step %d: walked proxier differs from a fresh one\n--- walked:\n%s\n--- fresh:\n%s", step, got, want)
		}
		if gotM != wantM {
			t.Fatalf("step %d: no_local_endpoints %s, a fresh proxier reports %s", step, gotM, wantM)
		}
	}
}
