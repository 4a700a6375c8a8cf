//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// BenchmarkKernelSync: N services × 10 endpoints, one slice each, every
// 10th a NodePort, on real nft in a network namespace of its own.
// first-sync-s is the cold start (an empty table) and restart-s a full
// sync that verifies every chain (what a restart over a correct table
// costs); an op of "full" is the periodic full resync of the unchanged
// table (FullSyncPeriod passed); an op of "partial" is a sync after 1% of
// the services had one endpoint replaced. cpu-s/op counts this process
// and the nft processes.
func BenchmarkKernelSync(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		for _, kind := range []string{"full", "partial"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, kind), func(b *testing.B) {
				inFreshNetns(b, func() { kernelSyncBench(b, n, 10, kind == "full") })
			})
		}
	}
}

// BenchmarkKernelPartialOne is a partial sync of one changed service (one
// endpoint replaced) over tables of N services × 10 endpoints: the fixed
// cost of one transaction, whatever it holds. With the netlink writer
// that is the kernel's commit (see BENCHMARKS.md); nft=only runs the same
// through nft, for comparison.
func BenchmarkKernelPartialOne(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		for _, via := range []string{"netlink", "nft-only"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, via), func(b *testing.B) {
				inFreshNetns(b, func() { partialOneBench(b, n, via == "netlink") })
			})
		}
	}
}

func partialOneBench(b *testing.B, n int, viaNetlink bool) {
	cfg := testConfig()
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		b.Skipf("nftables unavailable: %v", err)
	}
	if !viaNetlink {
		ifs.Netlink = nil
	}
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		b.Fatal(err)
	}
	c := makeCluster(n, 10)
	c.feed(p)
	ctx := context.Background()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	gen := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		gen++
		i := (gen * 37) % n
		old := c.slices[i]
		nw := makeSlice(i, len(old.Endpoints), 0)
		nw.Endpoints[0].Addresses = []string{fmt.Sprintf("10.%d.%d.%d", 192+(i>>8)%64, i%256, 1+gen%250)}
		p.OnEndpointSliceUpdate(old, nw)
		c.slices[i] = nw
		b.StartTimer()
		c0 := cpuTimeWithChildren()
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTimeWithChildren() - c0
		if last := p.Stats().Last; last.Full {
			b.Fatal("the sync was full")
		}
	}
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}

// BenchmarkKernelColdStart40k is the shape of kubernetes#139513: 40,000
// services × 1 endpoint, written into an empty table.
func BenchmarkKernelColdStart40k(b *testing.B) {
	inFreshNetns(b, func() {
		for b.Loop() {
			b.StopTimer()
			p := realProxier(b)
			makeCluster(40000, 1).feed(p)
			b.StartTimer()
			if err := p.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := p.Cleanup(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

func kernelSyncBench(b *testing.B, n, eps int, full bool) {
	clk := clocktesting.NewFakeClock(time.Now())
	cfg := testConfig()
	cfg.Clock = clk
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		b.Skipf("nftables unavailable: %v", err)
	}
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		b.Fatal(err)
	}
	c := makeCluster(n, eps)
	c.feed(p)
	ctx := context.Background()
	start, cpu0 := time.Now(), cpuTimeWithChildren()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	coldStart, coldCPU := time.Since(start), cpuTimeWithChildren()-cpu0
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	// A restart: a new proxier over the correct table reads every chain
	// (a RequestFullSync of p would skip the listing, resync.go).
	q := realProxier(b)
	c.feed(q)
	start, cpu0 = time.Now(), cpuTimeWithChildren()
	if err := q.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	restart, restartCPU := time.Since(start), cpuTimeWithChildren()-cpu0
	gen := 0
	var cpu time.Duration
	writes := 0
	b.ResetTimer()
	for b.Loop() {
		if full {
			clk.Step(2 * time.Hour) // FullSyncPeriod passed
		} else {
			b.StopTimer()
			gen++
			churn(p, c, n, gen)
			b.StartTimer()
		}
		c0 := cpuTimeWithChildren()
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTimeWithChildren() - c0
		writes += p.Stats().Last.Result.Writes
	}
	b.StopTimer()
	if full && !p.Stats().Last.Full {
		b.Error("the resync was not full")
	}
	b.ReportMetric(coldStart.Seconds(), "first-sync-s")
	b.ReportMetric(coldCPU.Seconds(), "first-sync-cpu-s")
	b.ReportMetric(restart.Seconds(), "restart-s")
	b.ReportMetric(restartCPU.Seconds(), "restart-cpu-s")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}

// churn replaces one endpoint in 1% of the services (a different set each
// round).
func churn(p *nftables.Proxier, c *cluster, n, gen int) {
	k := n / 100
	if k == 0 {
		k = 1
	}
	for j := 0; j < k; j++ {
		i := (gen*k + j) % n
		old := c.slices[i]
		nw := makeSlice(i, len(old.Endpoints), 0)
		nw.Endpoints[0].Addresses = []string{fmt.Sprintf("10.%d.%d.%d", 192+(i>>8)%64, i%256, 1+gen%250)}
		p.OnEndpointSliceUpdate(old, nw)
		c.slices[i] = nw
	}
}

func cpuTimeWithChildren() time.Duration {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return 0
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkKernelDriftCheck is one drift check (the services chain's
// first rule read back, every DriftCheckInterval: 2 s by default) over a
// table of N services × E endpoints: over netlink (NewInterfaces), and
// through nft (knftables ListRules, as before the check went over
// netlink: NFTables wrapped, so the netlink lister is not used).
// cpu-s/op counts this process and the nft processes.
func BenchmarkKernelDriftCheck(b *testing.B) {
	for _, sh := range []struct{ n, eps int }{{10000, 10}, {40000, 1}} {
		for _, via := range []string{"netlink", "nft"} {
			b.Run(fmt.Sprintf("services=%d/endpoints=%d/%s", sh.n, sh.eps, via), func(b *testing.B) {
				inFreshNetns(b, func() {
					ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
					if err != nil {
						b.Skipf("nftables unavailable: %v", err)
					}
					if via == "nft" {
						ifs.NFTables = struct{ knftables.Interface }{ifs.NFTables}
					}
					p, err := nftables.NewProxier(testConfig(), ifs)
					if err != nil {
						b.Fatal(err)
					}
					makeCluster(sh.n, sh.eps).feed(p)
					ctx := context.Background()
					if err := p.Sync(ctx); err != nil {
						b.Fatal(err)
					}
					var cpu time.Duration
					b.ResetTimer()
					for b.Loop() {
						c0 := cpuTimeWithChildren()
						drifted, err := nftables.NftablesDriftedForTest(p)
						cpu += cpuTimeWithChildren() - c0
						if err != nil || drifted {
							b.Fatalf("drift check of a correct table = %v, %v", drifted, err)
						}
					}
					b.StopTimer()
					b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
					if err := p.Cleanup(ctx); err != nil {
						b.Errorf("Cleanup: %v", err)
					}
				})
			})
		}
	}
}
