package changetracker

import (
	"fmt"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// coldCluster is the workload of /work/shared/upstream-bench (and of issue
// #14's table), object for object: N services with one TCP port each,
// every tenth a NodePort, and one EndpointSlice per service with 10 ready
// endpoints spread over 200 other nodes (the proxy runs on coldNode).
const coldNode = "bench-node"

type coldCluster struct {
	services []*v1.Service
	slices   []*discovery.EndpointSlice
}

func newColdCluster(n int) *coldCluster {
	const eps = 10
	c := &coldCluster{}
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
		c.services = append(c.services, svc)
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
		c.slices = append(c.slices, slice)
	}
	return c
}

// heapPeak samples the live heap objects (runtime/metrics, as
// upstream-bench does) every millisecond and keeps the maximum.
type heapPeak struct {
	stop, done chan struct{}
	peak       atomic.Uint64
}

func startHeapPeak() *heapPeak {
	h := &heapPeak{stop: make(chan struct{}), done: make(chan struct{})}
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

func (h *heapPeak) finish() uint64 { close(h.stop); <-h.done; return h.peak.Load() }

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkColdStart is the tracker's share of a proxy's cold start: every
// Service and EndpointSlice of the upstream-bench workload (N services × 10
// endpoints, one slice each, 10% NodePort) is fed through a Tracker's
// handlers, then one Update builds the maps the first full sync plans from.
//
// Metrics per op (one whole cold start): allocs/op and B/op (everything
// allocated), feed-ms and update-ms (wall time of the two phases), cpu-ms
// (the process's CPU time over both, the garbage collector's included),
// tracker-MiB (what the Tracker keeps live afterwards: the live heap after a
// GC minus the live heap of the objects alone) and peak-heap-MiB (the
// largest live heap sampled every millisecond during the op, the objects
// included, as upstream-bench reports it).
func BenchmarkColdStart(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			c := newColdCluster(n)
			base := liveHeap()
			var feed, update, cpu time.Duration
			var peak, kept uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runtime.GC()
				hp := startHeapPeak()
				b.StartTimer()
				c0, t0 := cpuTime(), time.Now()
				tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: coldNode})
				for _, s := range c.services {
					tr.OnServiceAdd(s)
				}
				for _, s := range c.slices {
					tr.OnEndpointSliceAdd(s)
				}
				tr.OnServiceSynced()
				tr.OnEndpointSlicesSynced()
				t1 := time.Now()
				u := tr.Update()
				t2 := time.Now()
				b.StopTimer()
				cpu += cpuTime() - c0
				feed += t1.Sub(t0)
				update += t2.Sub(t1)
				if len(u.Services) != n || len(u.Endpoints) != n {
					b.Fatalf("%d service ports, %d endpoint lists, want %d", len(u.Services), len(u.Endpoints), n)
				}
				peak = max(peak, hp.finish())
				if l := liveHeap(); l > base {
					kept = max(kept, l-base)
				}
				runtime.KeepAlive(tr)
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(feed.Microseconds())/1000/float64(b.N), "feed-ms")
			b.ReportMetric(float64(update.Microseconds())/1000/float64(b.N), "update-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms")
			b.ReportMetric(float64(kept)/(1<<20), "tracker-MiB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			runtime.KeepAlive(c)
		})
	}
}
