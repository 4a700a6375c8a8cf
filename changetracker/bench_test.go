package changetracker

import (
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// BenchmarkTrackerChurn measures the cost of one sync's worth of endpoint
// churn: services × 10 endpoints are applied first, then each iteration
// changes one endpoint IP in 100 slices (1% of 10,000) and calls Update.
// ns/change and allocs/change are per changed slice; they should not grow
// with the number of services.
func BenchmarkTrackerChurn(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) { benchmarkChurn(b, n) })
	}
}

func benchmarkChurn(b *testing.B, services int) {
	const endpointsPerService, churn = 10, 100
	tr := New(Config{IPFamily: v1.IPv4Protocol, NodeName: "node-1"})
	ip := func(svc, ep int) string { return fmt.Sprintf("10.%d.%d.%d", 1+svc/250, svc%250, 1+ep) }
	versions := make([][2]*discovery.EndpointSlice, services)
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%d", i)
		tr.OnServiceAdd(makeService("ns", name, []string{fmt.Sprintf("172.30.%d.%d", i/250, 1+i%250)}, []int32{80}, v1.ProtocolTCP))
		for v := 0; v < 2; v++ {
			eps := make([]epSpec, endpointsPerService)
			for e := range eps {
				eps[e] = epSpec{ip: ip(i, e), node: fuzzNodes[1+e%2]}
			}
			if v == 1 {
				eps[0].ip = ip(i, 200) // one endpoint moves to a new IP
			}
			versions[i][v] = makeSlice("ns", name, name+"-abcde", []int32{80}, v1.ProtocolTCP, eps...)
		}
		tr.OnEndpointSliceAdd(versions[i][0])
	}
	tr.OnServiceSynced()
	tr.OnEndpointSlicesSynced()
	if u := tr.Update(); len(u.Services) != services || len(u.Endpoints) != services {
		b.Fatalf("setup: %d services, %d endpoint lists", len(u.Services), len(u.Endpoints))
	}
	state := make([]int, services)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for k := 0; k < churn; k++ {
			j := (it*churn + k) % services
			old := versions[j][state[j]]
			state[j] ^= 1
			tr.OnEndpointSliceUpdate(old, versions[j][state[j]])
		}
		if u := tr.Update(); u.EndpointsResult.UpdatedServices.Len() != churn {
			b.Fatalf("iteration %d: %d services updated, want %d", it, u.EndpointsResult.UpdatedServices.Len(), churn)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	changes := float64(b.N * churn)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/changes, "ns/change")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/changes, "allocs/change")
}
