//go:build linux

package iptables_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// BenchmarkKernelSync applies the BenchmarkSyncFull/Partial workload to the
// real kernel, in a network namespace of its own, with both backends.
// Each op is one Sync (iptables-restore included); cpu-s/op is the CPU time
// of the Sync and of the iptables tools it ran. A "full" op resyncs an
// unchanged ruleset, which restores nothing since full syncs write only
// the chains that differ (BenchmarkKernelResync reports it against the
// cold start; BenchmarkKernelColdStart measures first syncs).
func BenchmarkKernelSync(b *testing.B) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, n := range []int{1000, 10000} {
			for _, kind := range []string{"full", "partial"} {
				b.Run(fmt.Sprintf("backend=%s/services=%d/%s", backend, n, kind), func(b *testing.B) {
					if backend == xtables.BackendNFT && n >= 10000 && os.Getenv("SVCPROXY_BENCH_NFT_10K") == "" {
						b.Skip("iptables-nft at 10,000 services: a cold start (chunked) and every full sync's listing " +
							"take tens of seconds each (see BENCHMARKS.md); set SVCPROXY_BENCH_NFT_10K=1 to run it")
					}
					netnstest.InFreshNetns(b, func() { kernelSyncBench(b, backend, n, kind == "full") })
				})
			}
		}
	}
}

// kernelBenchProxier returns a Proxier over the real iptables of backend,
// holding the n services of the benchmark workload (not synced yet).
func kernelBenchProxier(b *testing.B, backend string, n int) (*Proxier, xtables.Runner) {
	b.Helper()
	return kernelBenchProxierOver(b, backend, n, nil)
}

// kernelBenchProxierOver is kernelBenchProxier with the Runner passed
// through wrap (nil: as it is) before the Proxier gets it; it returns the
// wrapped one.
func kernelBenchProxierOver(b *testing.B, backend string, n int, wrap func(xtables.Runner) xtables.Runner) (*Proxier, xtables.Runner) {
	b.Helper()
	ipt, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
	if err != nil {
		b.Skipf("backend %s: %v", backend, err)
	}
	if wrap != nil {
		ipt = wrap(ipt)
	}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: ipt})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		p.OnServiceAdd(benchService(i))
		p.OnEndpointSliceAdd(benchSlice(i, 0))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	return p, ipt
}

func kernelSyncBench(b *testing.B, backend string, n int, full bool) {
	p, _ := kernelBenchProxier(b, backend, n)
	ctx := context.Background()
	start := time.Now()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "first-sync-s")
	ch := newEndpointChurn(n)
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		if full {
			p.RequestFullSync()
		} else {
			b.StopTimer()
			for range n / 100 {
				ch.step(p)
			}
			b.StartTimer()
		}
		c0 := cpuTimeWithChildren()
		if err := p.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTimeWithChildren() - c0
	}
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}

// cpuTimeWithChildren is the CPU time (user+system) of this process and of
// the children it has waited for (iptables-restore, iptables-save, ...):
// on a shared machine, wall time per op includes waiting for a core.
func cpuTimeWithChildren() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		return 0
	}
	return cpuTime() + time.Duration(ru.Utime.Nano()+ru.Stime.Nano())
}

// BenchmarkKernelDriftCheck measures the drift check Run makes every
// DriftCheckInterval (2 s) over a synced, unchanged ruleset (the Drifted
// hook: on legacy, table stamps; on nft, one ChainExists of
// KUBE-PROXY-CANARY per table), and, once per table, what a ChainExists
// costs, which the check runs for a table that changed since it was last
// verified. Reported: wall time and CPU (the iptables processes'
// included) per check, and the wall time of each table's ChainExists.
// nft above 2,000 services is skipped unless SVCPROXY_BENCH_NFT_10K=1 (its
// first sync takes minutes there).
func BenchmarkKernelDriftCheck(b *testing.B) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, n := range []int{1000, 2000, 10000} {
			b.Run(fmt.Sprintf("backend=%s/services=%d", backend, n), func(b *testing.B) {
				if backend == xtables.BackendNFT && n > 2000 && os.Getenv("SVCPROXY_BENCH_NFT_10K") == "" {
					b.Skip("nft above 2,000 services: the first sync takes minutes; set SVCPROXY_BENCH_NFT_10K=1")
				}
				netnstest.InFreshNetns(b, func() { driftCheckBench(b, backend, n) })
			})
		}
	}
}

func driftCheckBench(b *testing.B, backend string, n int) {
	p, ipt := kernelBenchProxier(b, backend, n)
	ctx := context.Background()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	b.ResetTimer()
	for b.Loop() {
		c0 := cpuTimeWithChildren()
		if drifted, err := Drifted(ctx, p); err != nil || drifted {
			b.Fatalf("Drifted = %v, %v", drifted, err)
		}
		cpu += cpuTimeWithChildren() - c0
	}
	b.StopTimer()
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/op")
	const rounds = 3
	for _, t := range []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle} {
		t0 := time.Now()
		for range rounds {
			if ok, err := ipt.ChainExists(ctx, t, xtables.ChainKubeProxyCanary); err != nil || !ok {
				b.Fatalf("canary in %s: %v %v", t, ok, err)
			}
		}
		b.ReportMetric(time.Since(t0).Seconds()*1000/rounds, "exists-"+string(t)+"-ms")
	}
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}

// BenchmarkKernelResync measures full syncs over a ruleset that already
// matches the plan, which write only the chains that differ (none):
// "steady" is the periodic full resync of the proxier that wrote it
// (RequestFullSync, then Sync), which lists nothing while the tables are
// provably as it left them (resync.go); "listed" is the same after a
// foreign chain was added to mangle (outside the timer), so it lists the
// tables as every steady resync did before; "restart" a new Proxier fed
// the same objects (outside the timer) and its first Sync. Reported
// besides the time per op: cold-s, the first sync into the empty
// namespace (cold-cpu-s: its CPU, the tools included); x-cold, the op's
// wall time over it (x-cold-cpu: CPU over CPU); written-lines/op, the
// lines restored (0: nothing rewritten); listings/op, the iptables-save
// runs. nft above 2,000 services needs SVCPROXY_BENCH_NFT_10K=1.
func BenchmarkKernelResync(b *testing.B) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, n := range []int{2000, 10000} {
			for _, kind := range []string{"steady", "listed", "restart"} {
				b.Run(fmt.Sprintf("backend=%s/services=%d/%s", backend, n, kind), func(b *testing.B) {
					if backend == xtables.BackendNFT && n > 2000 && os.Getenv("SVCPROXY_BENCH_NFT_10K") == "" {
						b.Skip("nft above 2,000 services: set SVCPROXY_BENCH_NFT_10K=1")
					}
					netnstest.InFreshNetns(b, func() { kernelResyncBench(b, backend, n, kind) })
				})
			}
		}
	}
}

func kernelResyncBench(b *testing.B, backend string, n int, kind string) {
	newProxier := func() (*Proxier, *listCounter) {
		q, r := kernelBenchProxierOver(b, backend, n, func(r xtables.Runner) xtables.Runner { return &listCounter{Runner: r} })
		return q, r.(*listCounter)
	}
	p, lc := newProxier()
	ctx := context.Background()
	start, coldCPU0 := time.Now(), cpuTimeWithChildren()
	if err := p.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	cold, coldCPU := time.Since(start), cpuTimeWithChildren()-coldCPU0
	var cpu, wall time.Duration
	written, listings := 0, 0
	stopProfile := opProfile(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		q, qc := p, lc
		switch kind {
		case "restart":
			b.StopTimer()
			q, qc = newProxier()
			runtime.GC()
			b.StartTimer()
		case "listed":
			b.StopTimer()
			if out, err := exec.Command("iptables-"+backend, "-t", "mangle", "-N", fmt.Sprintf("FOREIGN-%d", i)).CombinedOutput(); err != nil {
				b.Fatalf("foreign chain: %v\n%s", err, out)
			}
			b.StartTimer()
			q.RequestFullSync()
		default:
			q.RequestFullSync()
		}
		qc.lists = 0
		c0, t0 := cpuTimeWithChildren(), time.Now()
		if err := q.Sync(ctx); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTimeWithChildren() - c0
		wall += time.Since(t0)
		listings += qc.lists
		if st := q.Stats(); !st.Last.Full {
			b.Fatalf("want a full sync, got %+v", st.Last)
		} else {
			written += st.Last.Result.Writes
		}
	}
	b.StopTimer()
	stopProfile()
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(cold.Seconds(), "cold-s")
	b.ReportMetric(wall.Seconds()/float64(b.N)/cold.Seconds(), "x-cold")
	b.ReportMetric(float64(written)/float64(b.N), "written-lines/op")
	b.ReportMetric(float64(listings)/float64(b.N), "listings/op")
	b.ReportMetric(coldCPU.Seconds(), "cold-cpu-s")
	b.ReportMetric(cpu.Seconds()/float64(b.N)/coldCPU.Seconds(), "x-cold-cpu")
	if err := p.Cleanup(ctx); err != nil {
		b.Errorf("Cleanup: %v", err)
	}
}

// opProfile starts a CPU profile of the timed ops only (not the cold start
// before them) when SVCPROXY_BENCH_OP_CPUPROFILE names a file; it returns
// the function that stops it. -test.cpuprofile would also cover the cold
// start, whose render and bookkeeping share their functions with a resync.
func opProfile(b *testing.B) func() {
	path := os.Getenv("SVCPROXY_BENCH_OP_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// BenchmarkKernelColdStart is the first sync of a new Proxier into an
// empty network namespace: on iptables-nft it restores in chunks of
// chunkChains new chains (chunk.go). Each op gets a namespace of its own.
// Reported: wall time per op (ns/op) and cpu-s/op (the tools included).
// nft at 10,000 services needs SVCPROXY_BENCH_NFT_10K=1.
func BenchmarkKernelColdStart(b *testing.B) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, n := range []int{1000, 5000, 10000} {
			b.Run(fmt.Sprintf("backend=%s/services=%d", backend, n), func(b *testing.B) {
				if backend == xtables.BackendNFT && n >= 10000 && os.Getenv("SVCPROXY_BENCH_NFT_10K") == "" {
					b.Skip("nft at 10,000 services: set SVCPROXY_BENCH_NFT_10K=1")
				}
				var cpu, check time.Duration
				b.StopTimer()
				for range b.N {
					netnstest.InFreshNetns(b, func() {
						p, ipt := kernelBenchProxier(b, backend, n)
						runtime.GC()
						c0 := cpuTimeWithChildren()
						b.StartTimer()
						if err := p.Sync(context.Background()); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						cpu += cpuTimeWithChildren() - c0
						if ip, ok := ipt.(xtables.InProcessRestorer); ok {
							check += ip.InProcessStats().SelfCheckTime
						}
					})
				}
				b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
				// The read-back of the in-process write (part of ns/op).
				b.ReportMetric(check.Seconds()/float64(b.N), "selfcheck-s/op")
			})
		}
	}
}
