//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/nftablestest"
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
