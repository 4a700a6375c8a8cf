package iptables_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// countingRunner accepts everything and only counts what Restore is given.
type countingRunner struct {
	xtables.NoKernel
	family        v1.IPFamily
	bytes, lines  int
	restores      int
	lastBytes     int
	lastLines     int
	keepLastInput bool
	last          []byte
}

func (c *countingRunner) Family() v1.IPFamily { return c.family }
func (c *countingRunner) EnsureChain(context.Context, xtables.Table, xtables.Chain) (bool, error) {
	return true, nil
}
func (c *countingRunner) FlushChain(context.Context, xtables.Table, xtables.Chain) error  { return nil }
func (c *countingRunner) DeleteChain(context.Context, xtables.Table, xtables.Chain) error { return nil }
func (c *countingRunner) ChainExists(context.Context, xtables.Table, xtables.Chain) (bool, error) {
	return true, nil
}
func (c *countingRunner) EnsureRule(context.Context, xtables.RulePosition, xtables.Table, xtables.Chain, ...string) (bool, error) {
	return true, nil
}
func (c *countingRunner) DeleteRule(context.Context, xtables.Table, xtables.Chain, ...string) error {
	return nil
}
func (c *countingRunner) SaveInto(context.Context, xtables.Table, *bytes.Buffer) error { return nil }
func (c *countingRunner) HasRandomFully() bool                                         { return true }

func (c *countingRunner) Restore(_ context.Context, in xtables.RestoreInput) error {
	data := in.Text
	c.restores++
	c.lastBytes = len(data)
	c.lastLines = bytes.Count(data, []byte{'\n'})
	c.bytes += c.lastBytes
	c.lines += c.lastLines
	if c.keepLastInput {
		c.last = append(c.last[:0], data...)
	}
	return nil
}

// benchService is service i: ClusterIP TCP/80, every 10th also a NodePort.
func benchService(i int) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%100), Name: fmt.Sprintf("svc%d", i)},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	if i%10 == 0 {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = int32(30000 + i/10)
	}
	return s
}

// benchSlice is service i's slice: 10 ready endpoints; gen shifts the
// address of endpoint 0 (a replaced pod).
func benchSlice(i, gen int) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%100), Name: fmt.Sprintf("svc%d-abc", i), Labels: map[string]string{discovery.LabelServiceName: fmt.Sprintf("svc%d", i)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)}},
	}
	for e := range 10 {
		n := i*10 + e
		if e == 0 {
			n += gen * 1_000_000
		}
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+n/65536%128, n/256%256, n%256)},
			NodeName:   ptr.To("node-b"),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	return s
}

func benchProxier(b *testing.B, n int) (*Proxier, *countingRunner) { return benchProxierT(b, n) }

func benchProxierT(b testing.TB, n int) (*Proxier, *countingRunner) {
	b.Helper()
	cr := &countingRunner{family: v1.IPv4Protocol}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: cr})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		p.OnServiceAdd(benchService(i))
		p.OnEndpointSliceAdd(benchSlice(i, 0))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	if err := p.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	return p, cr
}

// heapWatch tracks the high-water mark of HeapInuse, sampled after each
// sync (before any GC could reclaim what the sync allocated).
type heapWatch struct{ peak uint64 }

func (h *heapWatch) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h.peak = max(h.peak, ms.HeapInuse)
}

func (h *heapWatch) report(b *testing.B) {
	b.ReportMetric(float64(h.peak)/(1<<20), "peak-heap-MiB")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
}

func BenchmarkSyncFull(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			p, cr := benchProxier(b, n)
			var hw heapWatch
			ctx := context.Background()
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				p.RequestFullSync()
				c0 := cpuTime()
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				b.StopTimer()
				hw.sample()
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(cr.lastLines), "rules/op")
			b.ReportMetric(float64(cr.lastBytes), "restore-bytes/op")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			hw.report(b)
			runtime.KeepAlive(p)
		})
	}
}

func BenchmarkSyncPartial(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			p, cr := benchProxier(b, n)
			var hw heapWatch
			ctx := context.Background()
			ch := newEndpointChurn(n)
			var cpu time.Duration
			cr.lines, cr.bytes, cr.restores = 0, 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				// 1% of the services each get one endpoint replaced.
				for range n / 100 {
					ch.step(p)
				}
				b.StartTimer()
				c0 := cpuTime()
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				b.StopTimer()
				hw.sample()
				b.StartTimer()
			}
			b.StopTimer()
			if cr.restores > 0 {
				b.ReportMetric(float64(cr.lines)/float64(cr.restores), "rules/op")
				b.ReportMetric(float64(cr.bytes)/float64(cr.restores), "restore-bytes/op")
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			hw.report(b)
			runtime.KeepAlive(p)
		})
	}
}

// endpointChurn replaces one endpoint of one of n benchmark services per
// step, walking the services with a prime stride so that consecutive steps
// spread over the table.
type endpointChurn struct {
	gen  []int // each service's current slice generation
	next int
}

func newEndpointChurn(n int) *endpointChurn { return &endpointChurn{gen: make([]int, n)} }

func (c *endpointChurn) step(p *Proxier) {
	i := c.next % len(c.gen)
	c.next += 7919
	old := benchSlice(i, c.gen[i])
	c.gen[i]++
	p.OnEndpointSliceUpdate(old, benchSlice(i, c.gen[i]))
}

// BenchmarkSyncCold is a cold start: per op a new Proxier is fed the n
// services (outside the timer) and makes its first, full sync. It is the
// sync whose payload buffer has no size from an earlier one.
func BenchmarkSyncCold(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ctx := context.Background()
			var cpu time.Duration
			var hw heapWatch
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				cr := &countingRunner{family: v1.IPv4Protocol}
				p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: cr})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					p.OnServiceAdd(benchService(i))
					p.OnEndpointSliceAdd(benchSlice(i, 0))
				}
				p.OnServiceSynced()
				p.OnEndpointSlicesSynced()
				runtime.GC()
				b.StartTimer()
				c0 := cpuTime()
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime() - c0
				b.StopTimer()
				hw.sample()
				runtime.KeepAlive(p)
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(hw.peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// TestColdOpsSized: the first full render sizes its ops from a count of
// lines (fullLinesEstimate) that holds the benchmark workload's lines
// with little to spare, so BenchmarkSyncCold allocates them once and
// not much more than they take.
func TestColdOpsSized(t *testing.T) {
	p, cr := benchProxierT(t, 500) // small enough that its buffers are kept (releaseLarge)
	n := cr.lastLines
	if capacity := OpsCap(p); capacity < n || capacity > n+n/20 {
		t.Errorf("ops buffer of %d for %d lines: want at least as many, at most 5%% more", capacity, n)
	}
}
