package ipvs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/ipvs"
)

// benchCluster is N services × 10 endpoints, every tenth a NodePort.
type benchCluster struct {
	services []*v1.Service
	slices   []*discovery.EndpointSlice
	gen      int
	svcGen   []int // per service: how often it churned
}

func newBenchCluster(n int) *benchCluster {
	c := &benchCluster{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("10.%d.%d.%d", 96+i/65000, (i/250)%256, i%250+1)
		var opts []svcOpt
		if i%10 == 0 {
			opts = append(opts, withNodePort(int32(30000+i/10)))
		}
		c.services = append(c.services, service("default", name, ip, 80, opts...))
		c.slices = append(c.slices, c.slice(i, 0))
	}
	c.svcGen = make([]int, n)
	return c
}

// slice is service i's endpoints in generation g (10 addresses).
func (c *benchCluster) slice(i, g int) *discovery.EndpointSlice {
	eps := make([]ep, 10)
	for j := range eps {
		node := "node-b"
		if j == 0 {
			node = testNode
		}
		k := i*10 + j + g
		eps[j] = ready(fmt.Sprintf("10.%d.%d.%d", 128+k/65000, (k/250)%256, k%250+1), node)
	}
	return slice("default", fmt.Sprintf("svc-%d", i), 8080, v1.ProtocolTCP, eps...)
}

func (c *benchCluster) feed(e *env) {
	for i := range c.services {
		e.p.OnServiceAdd(c.services[i])
		e.p.OnEndpointSliceAdd(c.slices[i])
	}
	e.synced()
}

// churn replaces one endpoint in 1% of the services.
func (c *benchCluster) churn(e *env) {
	c.gen++
	n := len(c.services) / 100
	for k := 0; k < n; k++ {
		i := (c.gen*n + k) * 97 % len(c.services)
		c.svcGen[i]++ // shifts the window of ten addresses by one
		e.p.OnEndpointSliceUpdate(nil, c.slice(i, c.svcGen[i]))
	}
}

func benchEnv(b *testing.B, n int) (*env, *benchCluster) {
	e := newEnv(b, ipvs.Config{})
	c := newBenchCluster(n)
	c.feed(e)
	if err := e.p.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	return e, c
}

// BenchmarkSyncFull is the periodic full sync of a programmed node: every
// plan recomputed, the kernel state read back and diffed (no changes).
func BenchmarkSyncFull(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			e, _ := benchEnv(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			ops := 0
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				e.clock.Step(time.Hour) // past SyncPeriod: the next sync is full
				if err := e.p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				st := e.last()
				if !st.Full {
					b.Fatal("not a full sync")
				}
				ops += st.Result.Writes
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/sync")
			b.ReportMetric(float64(ops)/float64(b.N), "ops/sync")
		})
	}
}

// BenchmarkSyncFullCold is the first sync of an empty node: everything created.
func BenchmarkSyncFullCold(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			c := newBenchCluster(n)
			b.ReportAllocs()
			ops := 0
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e := newEnv(b, ipvs.Config{})
				c.feed(e)
				b.StartTimer()
				if err := e.p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				ops += e.last().Result.Writes
			}
			b.ReportMetric(float64(ops)/float64(b.N), "ops/sync")
		})
	}
}

// BenchmarkSyncPartial is one sync after 1% of the services changed one
// endpoint each.
func BenchmarkSyncPartial(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			e, c := benchEnv(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			ops, kernelCalls := 0, 0
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				c.churn(e)
				e.resetCalls()
				b.StartTimer()
				cpu0 := processCPU()
				if err := e.p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - cpu0
				st := e.last()
				if st.Full {
					b.Fatal("a full sync")
				}
				ops += st.Result.Writes
				kernelCalls += e.mutations()
			}
			b.ReportMetric(float64(ops)/float64(b.N), "ops/sync")
			b.ReportMetric(float64(kernelCalls)/float64(b.N), "kernel-calls/sync")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/sync")
		})
	}
}
