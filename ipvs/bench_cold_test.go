package ipvs_test

import (
	"context"
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

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// coldCluster is the workload of /work/shared/upstream-bench, object for
// object (the same generator as changetracker's BenchmarkColdStart, which is
// unexported there): N services with one TCP port each, every tenth a
// NodePort, and one EndpointSlice per service with 10 ready endpoints spread
// over 200 other nodes; the proxy runs on coldNode.
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

// heapPeak samples the live heap objects (runtime/metrics, as upstream-bench
// does) every millisecond and keeps the maximum.
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

// BenchmarkColdStart is a proxy's cold start on upstream-bench's workload,
// the figure issue #14 compares with upstream's ipvs proxier (its "full
// sync" is the first sync after every object was fed): per op, a new Proxier
// over the ipvstest fakes and the iptablestest fake, every Service and
// EndpointSlice fed through its handlers, then the first (full) Sync of the
// empty node.
//
// Metrics per op: B/op and allocs/op (the whole op), feed-cpu-ms and
// sync-cpu-ms (the process's CPU time, garbage collector included, of the
// feed and of the first sync: sync-cpu-ms is the figure to set against
// upstream-bench's full-sync CPU), sync-MB (bytes allocated by the sync
// alone) and peak-heap-MiB (the largest live heap sampled every millisecond
// during the op, the objects included, as upstream-bench reports it).
//
//	go test -run XXX -bench BenchmarkColdStart/services=10000 -benchtime 3x ./ipvs/
func BenchmarkColdStart(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			c := newColdCluster(n)
			var feedCPU, syncCPU time.Duration
			var peak, syncBytes uint64
			var ms0, ms1 runtime.MemStats
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runtime.GC()
				hp := startHeapPeak()
				b.StartTimer()
				c0 := processCPU()
				e := newEnv(b, ipvs.Config{Common: engine.Common{NodeName: coldNode}})
				for k := range c.services {
					e.p.OnServiceAdd(c.services[k])
					e.p.OnEndpointSliceAdd(c.slices[k])
				}
				e.synced()
				c1 := processCPU()
				runtime.ReadMemStats(&ms0)
				if err := e.p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				c2 := processCPU()
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				if !e.last().Full {
					b.Fatal("the first sync was not full")
				}
				feedCPU += c1 - c0
				syncCPU += c2 - c1
				syncBytes += ms1.TotalAlloc - ms0.TotalAlloc
				peak = max(peak, hp.finish())
				runtime.KeepAlive(e)
				b.StartTimer()
			}
			b.ReportMetric(float64(feedCPU.Microseconds())/1000/float64(b.N), "feed-cpu-ms")
			b.ReportMetric(float64(syncCPU.Microseconds())/1000/float64(b.N), "sync-cpu-ms")
			b.ReportMetric(float64(syncBytes)/1e6/float64(b.N), "sync-MB")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			runtime.KeepAlive(c)
		})
	}
}
