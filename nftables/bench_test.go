//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// BenchmarkSync: the kernel benchmark's workload against the fake (the
// engine's own cost: plan, diff, render, plus knftables' fake).
func BenchmarkSync(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		for _, kind := range []string{"full", "partial"} {
			b.Run(fmt.Sprintf("services=%d/%s", n, kind), func(b *testing.B) {
				fakes := nftablestest.NewFakes(v1.IPv4Protocol)
				p := newTestProxier(b, fakes, testConfig())
				c := makeCluster(n, 10)
				c.feed(p)
				ctx := context.Background()
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				gen := 0
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if kind == "full" {
						p.RequestFullSync()
					} else {
						b.StopTimer()
						gen++
						churn(p, c, n, gen)
						b.StartTimer()
					}
					if err := p.Sync(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// sinkNFT takes every nft transaction as upstream-bench's nft sink does
// (rendered to text, then dropped); the table stays empty.
type sinkNFT struct{ *knftables.Fake }

func (s sinkNFT) Run(_ context.Context, tx *knftables.Transaction) error {
	_ = tx.String()
	return nil
}

// ListRules of one chain fails as a listing nft could not run: the sink
// keeps nothing, so the netlink writer's self-check (which lists a few
// chains of the first batch) is skipped as "not checked"; upstream's sink
// reads nothing back either.
func (s sinkNFT) ListRules(ctx context.Context, chain string) ([]*knftables.Rule, error) {
	if chain != "" {
		return nil, errors.New("the sink keeps nothing to list")
	}
	return s.Fake.ListRules(ctx, chain)
}

// sinkNetlink drops every batch (after the engine encoded it).
type sinkNetlink struct{ msgs *int }

func (s sinkNetlink) WriteBatch(_ context.Context, msgs []netlink.Message) error {
	*s.msgs += len(msgs)
	return nil
}

// BenchmarkComputeColdStart is the cold start of BenchmarkKernelColdStartBench
// (upstream-bench's objects, a new Proxier, its first full sync) against
// sinks: nft transactions rendered to text and dropped, netlink batches
// encoded and dropped. It measures the engine's own computation, as
// `upstream-bench -backend sink` measures upstream's: cpu-s is this
// process's CPU over the sync, peak-heap-MiB the largest live heap over
// the op (objects included), peak-offheap-MiB the most of the netlink
// arenas in use (outside the heap); live-after-MiB is the heap after a
// collection following the sync (upstream-bench's liveHeapMiB), with
// offheap-after-MiB of arenas kept resident.
//
//	go test -run XXX -bench 'BenchmarkComputeColdStart' -benchtime 3x ./nftables/
func BenchmarkComputeColdStart(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			c := proxytest.NewBenchCluster(n)
			var wall, cpu time.Duration
			var peak uint64
			var offPeak, offAfter int64
			var liveAfter uint64
			for b.Loop() {
				b.StopTimer()
				runtime.GC()
				hp := proxytest.StartHeapPeak()
				msgs := 0
				b.StartTimer()
				p, err := nftables.NewProxier(nftables.Config{
					Common: engine.Common{
						NodeName: proxytest.BenchNode,
						NodeIPs:  []netip.Addr{netip.MustParseAddr("192.0.2.10")},
					},
					Netfilter: engine.Netfilter{
						LocalDetector:     proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: netip.MustParsePrefix("10.128.0.0/10")},
						NodePortAddresses: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
					},
				}, nftables.Interfaces{
					NFTables: sinkNFT{knftables.NewFake(knftables.IPv4Family, nftables.TableName)},
					Netlink:  sinkNetlink{&msgs},
				})
				if err != nil {
					b.Fatal(err)
				}
				for k := range c.Services {
					p.OnServiceAdd(c.Services[k])
					p.OnEndpointSliceAdd(c.Slices[k])
				}
				p.OnServiceSynced()
				p.OnEndpointSlicesSynced()
				t0, c0 := time.Now(), cpuTimeSelf()
				if err := p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
				cpu += cpuTimeSelf() - c0
				b.StopTimer()
				peak = max(peak, hp.Finish())
				offPeak = max(offPeak, nftables.NetlinkStatsOf(p).BufferBytesPeak)
				// What the process holds between syncs: the live heap after
				// a collection (upstream-bench's liveHeapMiB) and the
				// arenas' pages kept resident.
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				liveAfter = max(liveAfter, ms.HeapAlloc)
				offAfter = max(offAfter, nftables.NetlinkStatsOf(p).BufferBytesResident)
				runtime.KeepAlive(p)
				if msgs == 0 {
					b.Fatal("nothing went over netlink")
				}
				b.StartTimer()
			}
			b.ReportMetric(wall.Seconds()/float64(b.N), "sync-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			// The encoder's arenas, outside the heap (internal/offheap); the sum
			// bounds the process's peak from above (the two peaks need not meet).
			b.ReportMetric(float64(offPeak)/(1<<20), "peak-offheap-MiB")
			b.ReportMetric((float64(peak)+float64(offPeak))/(1<<20), "peak-heap+offheap-MiB")
			b.ReportMetric(float64(liveAfter)/(1<<20), "live-after-MiB")
			b.ReportMetric(float64(offAfter)/(1<<20), "offheap-after-MiB")
			runtime.KeepAlive(c)
		})
	}
}

func cpuTimeSelf() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
