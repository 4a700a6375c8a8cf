//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// BenchmarkKernelColdStartBench is a cold start on shared/upstream-bench's
// workload (proxytest.BenchCluster, object for object, with upstream-bench's
// node IP, pod CIDR and node ports on every address), with real nft in a
// network namespace of its own, for the side-by-side with upstream's
// nftables proxier (`upstream-bench -backend real -proxiers nftables`): per
// op a new Proxier, every object fed, the first (full) sync of the empty
// table, then a restart (another new Proxier fed the same objects, its
// first sync over that table, which must write nothing: restart-s), a
// repair (the table flushed by hand, a third Proxier's first sync over it:
// repair-s), then the table deleted. The op is timed up to the end of the
// first sync; the restart and the repair are timed on their own. sync-s and sync-cpu-s (this process and the
// nft processes) are the first sync's; peak-heap-MiB is the largest live
// heap sampled every millisecond over the op, the objects included, as
// upstream-bench reports it.
//
//	sudo go test -run XXX -bench 'BenchmarkKernelColdStartBench/services=10000' -benchtime 1x ./nftables/
func BenchmarkKernelColdStartBench(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) { coldStartBench(b, n, 0) })
	}
}

// BenchmarkKernelColdStartChunks is BenchmarkKernelColdStartBench at
// 10,000 services with transactions of at most ops operations
// (Config.MaxTransactionOps; -1: one transaction), to pick the default.
//
//	sudo go test -run XXX -bench 'BenchmarkKernelColdStartChunks' -benchtime 1x ./nftables/
func BenchmarkKernelColdStartChunks(b *testing.B) {
	for _, ops := range []int{10000, 25000, 50000, 100000, 200000, -1} {
		b.Run(fmt.Sprintf("services=10000/ops=%d", ops), func(b *testing.B) { coldStartBench(b, 10000, ops) })
	}
}

func coldStartBench(b *testing.B, n, maxOps int) {
	inFreshNetns(b, func() {
		c := proxytest.NewBenchCluster(n)
		var wall, cpu, restart, restartCPU, repair, repairCPU time.Duration
		var peak uint64
		var offPeak int64
		var restartPeak uint64
		start := func() *nftables.Proxier {
			ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
			if err != nil {
				b.Skipf("nftables unavailable: %v", err)
			}
			p, err := nftables.NewProxier(nftables.Config{
				Common: engine.Common{
					NodeName: proxytest.BenchNode,
					NodeIPs:  []netip.Addr{netip.MustParseAddr("192.0.2.10")},
				},
				Netfilter: engine.Netfilter{
					LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.128.0.0/10")},
					NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
				},
				MaxTransactionOps: maxOps,
			}, ifs)
			if err != nil {
				b.Fatal(err)
			}
			for k := range c.Services {
				p.OnServiceAdd(c.Services[k])
				p.OnEndpointSliceAdd(c.Slices[k])
			}
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			return p
		}
		for b.Loop() {
			b.StopTimer()
			runtime.GC()
			hp := proxytest.StartHeapPeak()
			b.StartTimer()
			p := start()
			t0, c0 := time.Now(), cpuTimeWithChildren()
			if err := p.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			wall += time.Since(t0)
			cpu += cpuTimeWithChildren() - c0
			b.StopTimer()
			peak = max(peak, hp.Finish())
			offPeak = max(offPeak, nftables.NetlinkStatsOf(p).BufferBytesPeak)
			if !p.Stats().Last.Full {
				b.Fatal("the first sync was not full")
			}
			// A restart: a new Proxier over the table just written, the
			// first one gone (a restarted process holds only its own);
			// its peak heap sampled as the cold start's, objects included.
			p = nil
			runtime.GC()
			rhp := proxytest.StartHeapPeak()
			q := start()
			t0, c0 = time.Now(), cpuTimeWithChildren()
			if err := q.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			restart += time.Since(t0)
			restartCPU += cpuTimeWithChildren() - c0
			restartPeak = max(restartPeak, rhp.Finish())
			if w := q.Stats().Last.Result.Writes; w != 0 {
				b.Errorf("the restart wrote %d operations", w)
			}
			// A repair: the table flushed by hand ("nft flush table"),
			// then a new Proxier over it.
			nft(b, "flush", "table", "ip", nftables.TableName)
			r := start()
			t0, c0 = time.Now(), cpuTimeWithChildren()
			if err := r.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			repair += time.Since(t0)
			repairCPU += cpuTimeWithChildren() - c0
			if err := r.Cleanup(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(wall.Seconds()/float64(b.N), "sync-s")
		b.ReportMetric(cpu.Seconds()/float64(b.N), "sync-cpu-s")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		// The encoder's arenas, outside the heap (internal/offheap); the sum
		// bounds the process's peak from above (the two peaks need not meet).
		b.ReportMetric(float64(offPeak)/(1<<20), "peak-offheap-MiB")
		b.ReportMetric((float64(peak)+float64(offPeak))/(1<<20), "peak-heap+offheap-MiB")
		b.ReportMetric(restart.Seconds()/float64(b.N), "restart-s")
		b.ReportMetric(float64(restartPeak)/(1<<20), "restart-peak-heap-MiB")
		b.ReportMetric(restartCPU.Seconds()/float64(b.N), "restart-cpu-s")
		b.ReportMetric(repair.Seconds()/float64(b.N), "repair-s")
		b.ReportMetric(repairCPU.Seconds()/float64(b.N), "repair-cpu-s")
		runtime.KeepAlive(c)
	})
}
