package changetracker

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// The workload is proxytest's BenchCluster: shared/upstream-bench's
// objects, address for address.
const coldNode = proxytest.BenchNode

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
			c := proxytest.NewBenchCluster(n)
			base := liveHeap()
			var feed, update, cpu time.Duration
			var peak, kept uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runtime.GC()
				hp := proxytest.StartHeapPeak()
				b.StartTimer()
				c0, t0 := cpuTime(), time.Now()
				tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: coldNode})
				for _, s := range c.Services {
					tr.OnServiceAdd(s)
				}
				for _, s := range c.Slices {
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
				peak = max(peak, hp.Finish())
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
