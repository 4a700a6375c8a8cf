//go:build linux

package ipvs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkKernelSync times syncs against the real kernel (run in the VM:
// hack/vmtest/run-ipvs-tests.sh -run XXX -test.bench KernelSync
// -test.benchtime 1x): the first (cold) full sync that creates everything,
// a periodic full sync that reads it all back and changes nothing, and a
// partial sync after 1% of the services changed one endpoint.
func BenchmarkKernelSync(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			k := newKernelEnv(b)
			clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			kp := k.proxier(b, ipvs.Config{Common: engine.Common{Clock: clock}})
			c := newBenchCluster(n)
			e := &env{p: kp.p}
			c.feed(e)
			ctx := context.Background()
			var cold, full, partial time.Duration
			var partialOps int
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := kp.p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					cold = time.Since(start)
				}
				clock.Step(time.Hour)
				start = time.Now()
				if err := kp.p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				full += time.Since(start)
				if st := kp.p.Stats().Last; !st.Full || st.Result.Writes != 0 {
					b.Fatalf("periodic full sync: %+v", st)
				}
				c.churn(e)
				start = time.Now()
				if err := kp.p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				partial += time.Since(start)
				partialOps += kp.p.Stats().Last.Result.Writes
			}
			b.ReportMetric(float64(cold.Milliseconds()), "cold-full-ms")
			b.ReportMetric(float64(full.Milliseconds())/float64(b.N), "full-ms")
			b.ReportMetric(float64(partial.Milliseconds())/float64(b.N), "partial-ms")
			b.ReportMetric(float64(partialOps)/float64(b.N), "partial-ops")
		})
	}
}
