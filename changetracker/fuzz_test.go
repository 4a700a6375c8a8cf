package changetracker

import (
	"net/netip"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

// fuzzReader hands out fuzz bytes; past the end it returns zeros.
type fuzzReader struct {
	data []byte
	pos  int
}

func (r *fuzzReader) byte() byte {
	if r.pos >= len(r.data) {
		return 0
	}
	b := r.data[r.pos]
	r.pos++
	return b
}

func (r *fuzzReader) done() bool     { return r.pos >= len(r.data) }
func (r *fuzzReader) bit() bool      { return r.byte()&1 == 1 }
func (r *fuzzReader) pick(n int) int { return int(r.byte()) % n }

// Small pools, so that random sequences collide on names and addresses.
var (
	fuzzNames   = []string{"a", "b", "c"}
	fuzzIPs     = []string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2", "None", "", "bogus", "010.0.0.3", "::ffff:10.0.0.4"}
	fuzzExtIPs  = []string{"192.0.2.1", "2001:db8::1", "x", "192.0.2.2"}
	fuzzRanges  = []string{"198.51.100.0/24", " 203.0.113.0/24", "2001:db8::/48", "0.0.0.0/0", "1.2.3.4/40", "junk"}
	fuzzPorts   = []int32{80, 53, 0, -1, 70000, 443}
	fuzzProtos  = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "", "ICMP"}
	fuzzTypes   = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName, ""}
	fuzzEPIPs   = []string{"10.1.0.1", "10.1.0.2", "10.2.0.1", "fd00:1::1", "fd00:2::1", "bad", "010.001.000.003"}
	fuzzNodes   = []string{"", "node-1", "node-2"}
	fuzzPNames  = []string{"", "http", "dns"}
	fuzzIPModes = []*v1.LoadBalancerIPMode{nil, ptr.To(v1.LoadBalancerIPModeVIP), ptr.To(v1.LoadBalancerIPModeProxy)}
)

func fuzzService(r *fuzzReader, name string) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	svc.Spec.Type = fuzzTypes[r.pick(len(fuzzTypes))]
	for i, n := 0, r.pick(3); i < n; i++ {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, fuzzIPs[r.pick(len(fuzzIPs))])
	}
	if len(svc.Spec.ClusterIPs) > 0 && r.bit() {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	}
	for i, n := 0, r.pick(4); i < n; i++ {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{
			Name:     fuzzPNames[r.pick(len(fuzzPNames))],
			Port:     fuzzPorts[r.pick(len(fuzzPorts))],
			Protocol: fuzzProtos[r.pick(len(fuzzProtos))],
			NodePort: []int32{0, 30080, 99999}[r.pick(3)],
		})
	}
	for i, n := 0, r.pick(3); i < n; i++ {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, fuzzExtIPs[r.pick(len(fuzzExtIPs))])
	}
	for i, n := 0, r.pick(3); i < n; i++ {
		svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, fuzzRanges[r.pick(len(fuzzRanges))])
	}
	for i, n := 0, r.pick(3); i < n; i++ {
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{
			IP: fuzzExtIPs[r.pick(len(fuzzExtIPs))], IPMode: fuzzIPModes[r.pick(len(fuzzIPModes))],
		})
	}
	if r.bit() {
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = []int32{0, 32000, -5}[r.pick(3)]
	}
	if r.bit() {
		svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
	}
	if r.bit() {
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if r.bit() {
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To([]int32{0, 60, 100000}[r.pick(3)])}}
		}
	}
	switch r.pick(4) {
	case 1:
		svc.Labels = map[string]string{proxy.LabelServiceProxyName: "other"}
	case 2:
		svc.Annotations = map[string]string{proxy.AnnotationTopologyMode: "Auto"}
	}
	return svc
}

// FuzzServiceChangeTracker applies random add/update/delete/revert/apply
// sequences and checks: no panic; an update back to the applied state
// leaves nothing pending; the final map equals a from-scratch build of the
// final objects.
func FuzzServiceChangeTracker(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2, 1, 0, 1, 1, 0, 3, 0, 4, 1})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 3, 1, 2, 0})
	f.Add([]byte("\x00\x02\x02\x00\x01\x01\x00\x00\x01\x03\x01\x03\x02\x04\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		family := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}[r.pick(2)]
		tr := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: family})
		m := make(ServicePortMap)
		current := map[string]*v1.Service{}
		applied := map[string]*v1.Service{}
		for steps := 0; !r.done() && steps < 64; steps++ {
			name := fuzzNames[r.pick(len(fuzzNames))]
			switch r.pick(5) {
			case 0, 1: // add or update
				svc := fuzzService(r, name)
				tr.Update(current[name], svc)
				current[name] = svc
			case 2: // delete
				if current[name] != nil {
					tr.Update(current[name], nil)
					delete(current, name)
				}
			case 3: // update back to the applied state
				var back *v1.Service
				if a := applied[name]; a != nil {
					back = a.DeepCopy()
				}
				if current[name] != nil || back != nil {
					tr.Update(current[name], back)
				}
				if back == nil {
					delete(current, name)
				} else {
					current[name] = back
				}
				tr.mu.Lock()
				_, pending := tr.items[types.NamespacedName{Namespace: "ns", Name: name}]
				tr.mu.Unlock()
				if pending {
					t.Fatalf("service %s: update back to the applied state is still pending", name)
				}
			case 4: // sync
				m.Update(tr)
				applied = map[string]*v1.Service{}
				for k, v := range current {
					applied[k] = v
				}
			}
		}
		m.Update(tr)

		fresh := NewServiceChangeTracker(ServiceTrackerConfig{IPFamily: family})
		want := make(ServicePortMap)
		for _, svc := range current {
			fresh.Update(nil, svc)
		}
		want.Update(fresh)
		if !reflect.DeepEqual(m, want) {
			t.Fatalf("incremental map differs from a rebuild:\n got %v\nwant %v", m, want)
		}
		if tr.Pending() != 0 {
			t.Fatal("changes pending after Update")
		}
	})
}

func fuzzSlice(r *fuzzReader, svc, name string) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: []discovery.AddressType{discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN}[r.pick(3)],
	}
	if r.pick(8) == 0 {
		delete(s.Labels, discovery.LabelServiceName)
	}
	for i, n := 0, r.pick(3); i < n; i++ {
		p := discovery.EndpointPort{Name: ptr.To(fuzzPNames[r.pick(len(fuzzPNames))]), Protocol: ptr.To(fuzzProtos[r.pick(2)])}
		if r.pick(6) != 0 {
			p.Port = ptr.To(fuzzPorts[r.pick(len(fuzzPorts))])
		}
		s.Ports = append(s.Ports, p)
	}
	for i, n := 0, r.pick(5); i < n; i++ {
		e := discovery.Endpoint{Addresses: []string{fuzzEPIPs[r.pick(len(fuzzEPIPs))]}}
		flags := r.byte()
		if flags&1 != 0 {
			e.Conditions.Ready = ptr.To(flags&2 != 0)
		}
		if flags&4 != 0 {
			e.Conditions.Serving = ptr.To(flags&8 != 0)
		}
		if flags&16 != 0 {
			e.Conditions.Terminating = ptr.To(true)
		}
		if node := fuzzNodes[r.pick(len(fuzzNodes))]; node != "" {
			e.NodeName = ptr.To(node)
		}
		if flags&32 != 0 {
			e.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}

// FuzzEndpointSliceTracker drives a Tracker with an active Filter through
// random slice and service changes, and checks: no panic; a slice update
// back to the applied state leaves nothing pending for it; the endpoints
// map equals a rebuild from the final slices; the filtered service view
// equals the one computed from scratch.
func FuzzEndpointSliceTracker(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 1, 0, 2, 1, 3, 3, 1, 4})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25})
	f.Add([]byte("\x00\x01\x00\x01\x01\x00\x00\x02\x03\x01\x01\x05\x02\x00\x04"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &fuzzReader{data: data}
		family := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}[r.pick(2)]
		var filter proxy.EndpointFilter
		switch r.pick(3) {
		case 1:
			filter.IncludeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00:1::/64")}
		case 2:
			filter.ExcludeCIDRs = []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}
		}
		cfg := Config{IPFamily: family, NodeName: "node-1", Filter: filter}
		tr := New(cfg)
		current := map[string]*discovery.EndpointSlice{} // by slice name
		applied := map[string]*discovery.EndpointSlice{}
		services := map[string]*v1.Service{}
		sliceNames := []string{"s1", "s2", "s3"}
		for steps := 0; !r.done() && steps < 64; steps++ {
			name := sliceNames[r.pick(len(sliceNames))]
			switch r.pick(6) {
			case 0, 1:
				s := fuzzSlice(r, fuzzNames[r.pick(2)], name)
				// The service-name label may change (or go): the Tracker
				// must then drop the slice from its old service.
				tr.OnEndpointSliceUpdate(current[name], s)
				current[name] = s
			case 2:
				if old := current[name]; old != nil {
					tr.OnEndpointSliceDelete(old)
					delete(current, name)
				}
			case 3: // back to the applied state
				a, c := applied[name], current[name]
				switch {
				case a != nil:
					tr.OnEndpointSliceUpdate(c, a.DeepCopy())
					current[name] = a
				case a == nil && c != nil:
					tr.OnEndpointSliceDelete(c)
					delete(current, name)
				default:
					continue
				}
				if a != nil && a.Labels[discovery.LabelServiceName] == "" {
					continue
				}
				var svcName string
				if a != nil {
					svcName = a.Labels[discovery.LabelServiceName]
				} else {
					svcName = c.Labels[discovery.LabelServiceName]
				}
				tr.slices.mu.Lock()
				st := tr.slices.services[types.NamespacedName{Namespace: "ns", Name: svcName}]
				pending := false
				if st != nil {
					_, pending = st.pending.get(name)
				}
				tr.slices.mu.Unlock()
				if pending {
					t.Fatalf("slice %s: update back to the applied state is still pending", name)
				}
			case 4:
				svcName := fuzzNames[r.pick(2)]
				if r.bit() {
					svc := makeService("ns", svcName, []string{"10.0.0.1", "fd00::1"}, []int32{80}, v1.ProtocolTCP)
					svc.Spec.Ports[0].Name = fuzzPNames[r.pick(len(fuzzPNames))]
					tr.OnServiceUpdate(services[svcName], svc)
					services[svcName] = svc
				} else if services[svcName] != nil {
					tr.OnServiceDelete(services[svcName])
					delete(services, svcName)
				}
			case 5:
				tr.Update()
				applied = map[string]*discovery.EndpointSlice{}
				for k, v := range current {
					applied[k] = v
				}
			}
		}
		got := tr.Update()

		fresh := New(cfg)
		for _, s := range current {
			fresh.OnEndpointSliceAdd(s)
		}
		for _, svc := range services {
			fresh.OnServiceAdd(svc)
		}
		want := fresh.Update()
		if !reflect.DeepEqual(got.Endpoints, want.Endpoints) {
			t.Fatalf("incremental endpoints differ from a rebuild:\n got %v\nwant %v", got.Endpoints, want.Endpoints)
		}
		if !reflect.DeepEqual(got.Services, want.Services) {
			t.Fatalf("incremental service view differs from a rebuild:\n got %v\nwant %v", got.Services, want.Services)
		}
		// The filtered view is exactly the services with endpoints.
		if filter.Active() {
			for name := range tr.serviceMap {
				hasEps := false
				for epName := range got.Endpoints {
					if epName.NamespacedName == name.NamespacedName {
						hasEps = true
					}
				}
				if _, in := got.Services[name]; in != hasEps {
					t.Fatalf("service port %v: in view %v, has endpoints %v", name, in, hasEps)
				}
			}
		}
		if s, e := tr.Pending(); s != 0 || e != 0 {
			t.Fatalf("pending after Update: %d, %d", s, e)
		}
	})
}
