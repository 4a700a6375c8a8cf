package ipvs_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// The workload is proxytest's BenchCluster: shared/upstream-bench's
// objects, address for address.
const coldNode = proxytest.BenchNode

// BenchmarkColdStart is a proxy's cold start on upstream-bench's workload,
// the figure issue #14 compares with upstream's ipvs proxier (its "full
// sync" is the first sync after every object was fed): per op, a new Proxier
// over the ipvstest fakes and the xtablestest fake, every Service and
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
			c := proxytest.NewBenchCluster(n)
			var feedCPU, syncCPU time.Duration
			var peak, syncBytes uint64
			var ms0, ms1 runtime.MemStats
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				runtime.GC()
				hp := proxytest.StartHeapPeak()
				b.StartTimer()
				c0 := processCPU()
				e := newEnv(b, ipvs.Config{Common: engine.Common{NodeName: coldNode}})
				for k := range c.Services {
					e.p.OnServiceAdd(c.Services[k])
					e.p.OnEndpointSliceAdd(c.Slices[k])
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
				peak = max(peak, hp.Finish())
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
