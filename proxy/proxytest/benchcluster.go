package proxytest

import (
	"fmt"
	"net/netip"
	"runtime/metrics"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// BenchNode is the node a proxy runs on in a BenchCluster: no endpoint of
// the cluster is on it.
const BenchNode = "bench-node"

// BenchCluster is the synthetic workload of the project's cold-start
// benchmarks and of shared/upstream-bench (issue #14's table), object for
// object, so that figures set side by side with upstream's come from the
// same objects: N services with one TCP port each (cluster IPs from
// 10.96.0.1), every tenth a NodePort, and one EndpointSlice per service
// with 10 ready endpoints (from 10.128.0.1) spread over 200 other nodes.
type BenchCluster struct {
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
}

// NewBenchCluster builds the workload for n services.
func NewBenchCluster(n int) *BenchCluster {
	const eps = 10
	c := &BenchCluster{}
	tcp := v1.ProtocolTCP
	addr := func(base netip.Addr, k int) string {
		b := base.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v += uint32(k)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
	}
	svcBase, epBase := netip.MustParseAddr("10.96.0.0"), netip.MustParseAddr("10.128.0.0")
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		ns := fmt.Sprintf("ns-%02d", i%50)
		ip := addr(svcBase, i+1)
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("uid-svc-%d", i)), ResourceVersion: "1"},
			Spec: v1.ServiceSpec{
				Type:       v1.ServiceTypeClusterIP,
				ClusterIP:  ip,
				ClusterIPs: []string{ip},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				Selector:   map[string]string{"app": name},
				Ports:      []v1.ServicePort{{Name: "http", Protocol: tcp, Port: 80, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if i%10 == 0 {
			svc.Spec.Type = v1.ServiceTypeNodePort
			svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			svc.Spec.Ports[0].NodePort = int32(30000 + i/10%2768)
		}
		c.Services = append(c.Services, svc)
		slice := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: name + "-0", Namespace: ns, ResourceVersion: "1",
				Labels: map[string]string{discovery.LabelServiceName: name, discovery.LabelManagedBy: "endpointslice-controller.k8s.io"},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: &tcp}},
		}
		for j := 0; j < eps; j++ {
			slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{
				Addresses:  []string{addr(epBase, i*eps+j+1)},
				Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				NodeName:   ptr.To(fmt.Sprintf("node-%03d", (i*eps+j)%200)),
			})
		}
		c.Slices = append(c.Slices, slice)
	}
	return c
}

// HeapPeak samples the live heap objects (runtime/metrics, as
// upstream-bench does) every millisecond from StartHeapPeak until Finish,
// and keeps the maximum.
type HeapPeak struct {
	stop, done chan struct{}
	peak       atomic.Uint64
}

// StartHeapPeak starts sampling.
func StartHeapPeak() *HeapPeak {
	h := &HeapPeak{stop: make(chan struct{}), done: make(chan struct{})}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(s)
		if v := s[0].Value.Uint64(); v > h.peak.Load() {
			h.peak.Store(v)
		}
	}
	read()
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				read()
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return h
}

// Finish stops sampling and returns the largest live heap seen, in bytes.
func (h *HeapPeak) Finish() uint64 { close(h.stop); <-h.done; return h.peak.Load() }
