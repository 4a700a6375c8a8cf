package changetracker

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

func addrList(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func prefixList(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func buildPorts(t *testing.T, family v1.IPFamily, svc *v1.Service) (ServicePortMap, int) {
	t.Helper()
	errs := 0
	log := funcr.New(func(prefix, args string) { errs++ }, funcr.Options{Verbosity: 0})
	tr := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: family, Logger: log})
	m := make(ServicePortMap)
	tr.Update(nil, svc)
	m.Update(tr)
	if tr.Skipped() != uint64(errs) {
		t.Errorf("Skipped() = %d, but %d errors were logged", tr.Skipped(), errs)
	}
	// Deleting it rebuilds the old object quietly: nothing logged twice.
	before := errs
	tr.Update(svc, nil)
	if errs != before || tr.Skipped() != uint64(before) {
		t.Errorf("delete logged %d more errors", errs-before)
	}
	return m, before
}

func TestServicePortBuilding(t *testing.T) {
	dual := []string{"10.0.0.1", "fd00::1"}
	tests := []struct {
		name   string
		family v1.IPFamily
		svc    *v1.Service
		want   map[proxy.ServicePortName]*proxy.BaseServicePort // only the fields set are compared
		errors int
	}{{
		name:   "cluster IP of the tracker's family is picked from clusterIPs",
		family: v1.IPv6Protocol,
		svc:    makeService("ns", "s", dual, []int32{80}, v1.ProtocolTCP),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("fd00::1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
	}, {
		name:   "service without a cluster IP of this family is left out",
		family: v1.IPv6Protocol,
		svc:    makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP),
		want:   map[proxy.ServicePortName]*proxy.BaseServicePort{},
	}, {
		name:   "headless service is left out",
		family: v1.IPv4Protocol,
		svc:    makeService("ns", "s", []string{"None"}, []int32{80}, v1.ProtocolTCP),
		want:   map[proxy.ServicePortName]*proxy.BaseServicePort{},
	}, {
		name:   "external IPs, load-balancer VIPs and source ranges are filtered to the family",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", dual, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalIPs = []string{"192.0.2.1", "2001:db8::1"}
			s.Spec.LoadBalancerSourceRanges = []string{" 198.51.100.0/24 ", "2001:db8::/64", "203.0.113.7/24"}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
				{IP: "192.0.2.10"}, {IP: "2001:db8::10"}, {Hostname: "lb.example.com"},
				{IP: "192.0.2.11", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
				{IP: "192.0.2.12", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
			}
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {
				ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone,
				ExternalIPAddrs:      addrList("192.0.2.1"),
				LoadBalancerVIPAddrs: addrList("192.0.2.10", "192.0.2.12"),
				LoadBalancerRanges:   prefixList("198.51.100.0/24", "203.0.113.0/24"),
			},
		},
	}, {
		name:   "a zero-length source range allows everyone",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", dual, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24", "0.0.0.0/0"}
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
	}, {
		name:   "bad addresses and ranges are logged and skipped, the rest kept",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.ExternalIPs = []string{"not-an-ip", "192.0.2.1"}
			s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33"}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "300.1.1.1"}}
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone, ExternalIPAddrs: addrList("192.0.2.1")},
		},
		errors: 3,
	}, {
		name:   "legacy IPv4 with leading zeros is accepted",
		family: v1.IPv4Protocol,
		svc:    makeService("ns", "s", []string{"010.000.000.001"}, []int32{80}, v1.ProtocolTCP),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
	}, {
		name:   "out-of-range port is logged and skipped, other ports kept",
		family: v1.IPv4Protocol,
		svc:    makeService("ns", "s", []string{"10.0.0.1"}, []int32{70000, 0, 53}, v1.ProtocolUDP),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p53", v1.ProtocolUDP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 53, ProtocolValue: v1.ProtocolUDP, SessionAffinity: v1.ServiceAffinityNone},
		},
		errors: 2,
	}, {
		name:   "out-of-range node port is dropped, the port kept",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 99999
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
		errors: 1,
	}, {
		name:   "unset protocol defaults to TCP, unknown protocol is skipped",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80, 81}, "", func(s *v1.Service) {
			s.Spec.Ports[1].Protocol = "ICMP"
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
		errors: 1,
	}, {
		name:   "ClientIP affinity defaults to 10800 seconds",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityClientIP, StickyMaxAge: 10800},
		},
	}, {
		name:   "ClientIP affinity timeout is taken from the config",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityClientIP, StickyMaxAge: 60},
		},
	}, {
		name:   "externalTrafficPolicy Local counts only when externally accessible",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
	}, {
		name:   "LoadBalancer with externalTrafficPolicy Local has a health-check node port",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
			s.Spec.Ports[0].NodePort = 30080
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
			s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferClose)
			s.Annotations = map[string]string{proxy.AnnotationTopologyAwareHints: "auto"}
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {
				ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone,
				NodePortNum: 30080, ExternalLocal: true, InternalLocal: true, HealthCheckNodePortNum: 32000,
				TrafficDistributionValue: "PreferClose", HintsAnnotationValue: "auto",
				AnnotationsValue: map[string]string{proxy.AnnotationTopologyAwareHints: "auto"},
			},
		},
	}, {
		name:   "duplicate port name and protocol keeps the first",
		family: v1.IPv4Protocol,
		svc: makeService("ns", "s", []string{"10.0.0.1"}, []int32{80, 81}, v1.ProtocolTCP, func(s *v1.Service) {
			s.Spec.Ports[1].Name = s.Spec.Ports[0].Name
		}),
		want: map[proxy.ServicePortName]*proxy.BaseServicePort{
			spn("ns", "s", "p80", v1.ProtocolTCP): {ClusterIPAddr: netip.MustParseAddr("10.0.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP, SessionAffinity: v1.ServiceAffinityNone},
		},
		errors: 1,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, errs := buildPorts(t, tc.family, tc.svc)
			if len(m) != len(tc.want) {
				t.Fatalf("got %d ports %v, want %d", len(m), m, len(tc.want))
			}
			for name, want := range tc.want {
				got, ok := m[name].(*proxy.BaseServicePort)
				if !ok {
					t.Fatalf("port %v missing", name)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("port %v:\n got %+v\nwant %+v", name, got, want)
				}
			}
			if errs != tc.errors {
				t.Errorf("logged %d errors, want %d", errs, tc.errors)
			}
		})
	}
}

func TestServiceUpdateBackToOriginalIsNoChange(t *testing.T) {
	tr := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: v1.IPv4Protocol})
	m := make(ServicePortMap)
	orig := makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP)
	tr.Update(nil, orig)
	m.Update(tr)
	changed := orig.DeepCopy()
	changed.Spec.Ports[0].Port = 81
	if !tr.Update(orig, changed) {
		t.Fatal("a real change was not pending")
	}
	if tr.Update(changed, orig.DeepCopy()) {
		t.Fatal("an update back to the original is still pending")
	}
	if res := m.Update(tr); res.UpdatedServices.Len() != 0 {
		t.Fatalf("UpdatedServices = %v", res.UpdatedServices)
	}
	// An add followed by a delete before any apply is no change either.
	other := makeService("ns", "t", []string{"10.0.0.2"}, []int32{80}, v1.ProtocolTCP)
	tr.Update(nil, other)
	if tr.Update(other, nil) {
		t.Fatal("add+delete is pending")
	}
	// Changes to fields the proxy ignores are no change.
	relabelled := orig.DeepCopy()
	relabelled.Labels = map[string]string{"x": "y"}
	relabelled.ResourceVersion = "42"
	if tr.Update(orig, relabelled) {
		t.Fatal("label-only change is pending")
	}
}

func TestServiceMapUpdateResult(t *testing.T) {
	tr := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: v1.IPv4Protocol})
	m := make(ServicePortMap)
	dns := makeService("ns", "dns", []string{"10.0.0.10"}, []int32{53}, v1.ProtocolUDP)
	web := makeService("ns", "web", []string{"10.0.0.20"}, []int32{80}, v1.ProtocolTCP)
	lb := makeService("ns", "lb", []string{"10.0.0.30"}, []int32{53}, v1.ProtocolUDP, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 32001
	})
	for _, s := range []*v1.Service{dns, web, lb} {
		tr.Update(nil, s)
	}
	res := m.Update(tr)
	if !res.UpdatedServices.Equal(sets.New(nn("ns", "dns"), nn("ns", "web"), nn("ns", "lb"))) || res.DeletedUDPClusterIPs.Len() != 0 {
		t.Fatalf("add result = %+v", res)
	}
	if hc := m.HealthCheckNodePorts(); len(hc) != 1 || hc[nn("ns", "lb")] != 32001 {
		t.Fatalf("HealthCheckNodePorts = %v", hc)
	}
	// Deleting a UDP service and a TCP one: only the UDP cluster IP is stale.
	tr.Update(dns, nil)
	tr.Update(web, nil)
	// Changing a UDP service's cluster IP makes the old one stale.
	lb2 := lb.DeepCopy()
	lb2.Spec.ClusterIP, lb2.Spec.ClusterIPs = "10.0.0.31", []string{"10.0.0.31"}
	tr.Update(lb, lb2)
	res = m.Update(tr)
	if want := sets.New(netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("10.0.0.30")); !res.DeletedUDPClusterIPs.Equal(want) {
		t.Errorf("DeletedUDPClusterIPs = %v, want %v", res.DeletedUDPClusterIPs, want)
	}
	if len(m) != 1 || m[spn("ns", "lb", "p53", v1.ProtocolUDP)].ClusterIP() != netip.MustParseAddr("10.0.0.31") {
		t.Errorf("map after update = %v", m)
	}
}

func TestMakeServicePortWraps(t *testing.T) {
	type wrapped struct {
		*proxy.BaseServicePort
		chain string
	}
	tr := NewServiceChangeTracker(ServiceTrackerConfig{
		IPFamily: v1.IPv4Protocol,
		MakeServicePort: func(port *v1.ServicePort, svc *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort {
			return &wrapped{base, "KUBE-SVC-" + svc.Name + "-" + port.Name}
		},
	})
	m := make(ServicePortMap)
	tr.Update(nil, makeService("ns", "s", []string{"10.0.0.1"}, []int32{80}, v1.ProtocolTCP))
	m.Update(tr)
	w, ok := m[spn("ns", "s", "p80", v1.ProtocolTCP)].(*wrapped)
	if !ok || w.chain != "KUBE-SVC-s-p80" || w.Port() != 80 {
		t.Fatalf("wrapped port = %#v", m)
	}
}
