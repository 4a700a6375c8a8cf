//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// BenchmarkKernelResync: the full resync of an unchanged table by the
// proxier that wrote it, on real nft (BenchmarkKernelSync's workload).
// An op is "steady": RequestFullSync, then Sync, which lists nothing
// while the ruleset generation is the one our last transaction left
// (resync.go). Reported once per run, after one cold start: cold-s (and
// cold-cpu-s, nft included); x-cold, the op's wall time over it (and
// x-cold-cpu, CPU over CPU); periodic-s, the FullSyncPeriod
// resync (also skipped); listed-s, the periodic resync after a foreign
// table was added (outside the timer), which lists names and elements as
// every periodic resync did before; listings/op and writes/op of the
// steady op.
func BenchmarkKernelResync(b *testing.B) {
	for _, n := range []int{2000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			inFreshNetns(b, func() { kernelResyncBench(b, n) })
		})
	}
}

func kernelResyncBench(b *testing.B, n int) {
	ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
	if err != nil {
		b.Skipf("nftables unavailable: %v", err)
	}
	cl := &countingLister{real: ifs.Comments}
	ifs.Comments = cl
	clk := clocktesting.NewFakeClock(time.Now())
	cfg := testConfig()
	cfg.Clock = clk
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		b.Fatal(err)
	}
	makeCluster(n, 10).feed(p)
	ctx := context.Background()
	timed := func() time.Duration {
		t0 := time.Now()
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		if !p.Stats().Last.Full {
			b.Fatal("not a full sync")
		}
		return time.Since(t0)
	}
	coldCPU0 := cpuTimeWithChildren()
	cold := timed()
	coldCPU := cpuTimeWithChildren() - coldCPU0
	var wall, cpu time.Duration
	listings, writes := 0, 0
	b.ResetTimer()
	for b.Loop() {
		p.RequestFullSync()
		cl.lists.Store(0)
		c0 := cpuTimeWithChildren()
		wall += timed()
		cpu += cpuTimeWithChildren() - c0
		listings += int(cl.lists.Load())
		writes += p.Stats().Last.Result.Writes
	}
	b.StopTimer()
	clk.Step(2 * time.Hour)
	periodic := timed()
	if out, err := exec.Command("nft", "add table ip foreign").CombinedOutput(); err != nil {
		b.Fatalf("nft: %v\n%s", err, out)
	}
	clk.Step(2 * time.Hour)
	cl.lists.Store(0)
	listed := timed()
	if cl.lists.Load() == 0 {
		b.Error("the resync after a foreign table did not list")
	}
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(wall.Seconds()/float64(b.N)/cold.Seconds(), "x-cold")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(coldCPU.Seconds(), "cold-cpu-s")
	b.ReportMetric(cpu.Seconds()/float64(b.N)/coldCPU.Seconds(), "x-cold-cpu")
	b.ReportMetric(periodic.Seconds(), "periodic-s")
	b.ReportMetric(listed.Seconds(), "listed-s")
	b.ReportMetric(listed.Seconds()/cold.Seconds(), "listed-x-cold")
	b.ReportMetric(float64(listings)/float64(b.N), "listings/op")
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}
