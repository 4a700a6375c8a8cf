package winkernel_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// benchWorld is services × endpoints on an overlay network, a fifth of the
// endpoints on other nodes (behind one remote subnet), the rest local pods
// with their CNI endpoints in the fake. Cluster-IP services, one TCP port.
type benchWorld struct {
	services  []*v1.Service
	slices    []*discovery.EndpointSlice
	localIPs  []netip.Addr
	perSvc    int
	remoteGen int
}

var benchNode = netip.MustParseAddr("192.168.50.10")

func nthAddr(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func newBenchWorld(nSvc, perSvc int) *benchWorld {
	w := &benchWorld{perSvc: perSvc}
	for i := 0; i < nSvc; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		w.services = append(w.services, &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: v1.ServiceSpec{ClusterIP: nthAddr(netip.MustParseAddr("10.96.0.0"), i+1).String(),
				Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
		})
		w.slices = append(w.slices, w.slice(i, 0))
	}
	return w
}

// slice is service i's slice; gen changes the remote endpoints' addresses.
func (w *benchWorld) slice(i, gen int) *discovery.EndpointSlice {
	name := fmt.Sprintf("svc-%05d", i)
	ready, port, proto, pname := true, int32(8080), v1.ProtocolTCP, "http"
	local, remote := "node-a", "node-b"
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "bench", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	nRemote := w.perSvc / 5
	for j := 0; j < w.perSvc; j++ {
		ep := discovery.Endpoint{Conditions: discovery.EndpointConditions{Ready: &ready}}
		if j < nRemote {
			ep.NodeName = &remote
			ep.Addresses = []string{nthAddr(netip.MustParseAddr("10.128.0.0"), (i*nRemote+j)*4+gen%4+1).String()}
		} else {
			ep.NodeName = &local
			ep.Addresses = []string{nthAddr(netip.MustParseAddr("10.1.0.0"), i*w.perSvc+j+1).String()}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func (w *benchWorld) fakes() *winkerneltest.Fakes {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	f.SetNetwork(winkernel.NetworkOverlay, winkernel.RemoteSubnet{
		DestinationPrefix: netip.MustParsePrefix("10.128.0.0/9"), ProviderAddress: netip.MustParseAddr("192.168.50.11")})
	for _, s := range w.slices {
		for _, ep := range s.Endpoints {
			if *ep.NodeName == "node-a" {
				f.AddPod("", netip.MustParseAddr(ep.Addresses[0]))
			}
		}
	}
	return f
}

func (w *benchWorld) proxier(b *testing.B, f *winkerneltest.Fakes) *winkernel.Proxier {
	p, err := winkernel.NewProxier(winkernel.Config{
		Common:      engine.Common{NodeName: "node-a", NodeIPs: []netip.Addr{benchNode}},
		NetworkName: winkerneltest.NetworkName,
		SourceVIP:   netip.MustParseAddr("10.1.255.250"),
	}, f.Interfaces())
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range w.services {
		p.OnServiceAdd(s)
	}
	for _, s := range w.slices {
		p.OnEndpointSliceAdd(s)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	return p
}

func reportCalls(b *testing.B, f *winkerneltest.Fakes, ops int, cpu time.Duration) {
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	c := f.HNS.Calls()
	total := 0
	for _, n := range c {
		total += n
	}
	b.ReportMetric(float64(total)/float64(ops), "hns-calls/op")
	b.ReportMetric(float64(writes(f))/float64(ops), "hns-writes/op")
	b.ReportMetric(float64(c["ListLoadBalancers"]+c["ListEndpoints"])/float64(ops), "listings/op")
}

var benchSizes = []int{1000, 10000}

// BenchmarkFullSync: a cold start, every LB and remote endpoint created.
func BenchmarkFullSync(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := newBenchWorld(n, 10)
			var last *winkerneltest.Fakes
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := w.fakes()
				p := w.proxier(b, f)
				runtime.GC() // the setup's garbage is not the sync's
				b.StartTimer()
				c0 := processCPU()
				if err := p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - c0
				b.StopTimer()
				p.Close()
				last = f
			}
			reportCalls(b, last, 1, cpu)
		})
	}
}

// BenchmarkChurn: each op moves the remote endpoints of 1% of the services
// and syncs (partial): HNS calls are proportional to the change.
func BenchmarkChurn(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := newBenchWorld(n, 10)
			f := w.fakes()
			p := w.proxier(b, f)
			ctx := context.Background()
			if err := p.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			f.HNS.ResetCalls()
			changed := n / 100
			gen := 0
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				gen++
				for k := 0; k < changed; k++ {
					j := (i*changed + k) % n
					old := w.slices[j]
					w.slices[j] = w.slice(j, gen)
					p.OnEndpointSliceUpdate(old, w.slices[j])
				}
				runtime.GC()
				b.StartTimer()
				c0 := processCPU()
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - c0
			}
			b.StopTimer()
			if p.Stats().FullSyncs != 1 {
				b.Fatalf("%d full syncs", p.Stats().FullSyncs)
			}
			reportCalls(b, f, b.N, cpu)
			b.ReportMetric(float64(changed), "services-changed/op")
		})
	}
}

// BenchmarkRestart: a new proxier over an HNS that already holds the right
// state: one listing, zero writes.
func BenchmarkRestart(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := newBenchWorld(n, 10)
			f := w.fakes()
			p := w.proxier(b, f)
			if err := p.Sync(context.Background()); err != nil {
				b.Fatal(err)
			}
			p.Close()
			f.HNS.ResetCalls()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				p := w.proxier(b, f)
				runtime.GC() // the setup's garbage is not the sync's
				b.StartTimer()
				c0 := processCPU()
				if err := p.Sync(context.Background()); err != nil {
					b.Fatal(err)
				}
				cpu += processCPU() - c0
				b.StopTimer()
				p.Close()
			}
			if n := writes(f); n != 0 {
				b.Fatalf("restart wrote %d times: %v", n, f.HNS.Calls())
			}
			reportCalls(b, f, b.N, cpu)
		})
	}
}

// BenchmarkDriftCheck: the drift check Run makes every DriftCheckInterval
// (2 s by default) over a synced HNS: two listings, no write.
func BenchmarkDriftCheck(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			w := newBenchWorld(n, 10)
			f := w.fakes()
			p := w.proxier(b, f)
			ctx := context.Background()
			if err := p.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			f.HNS.ResetCalls()
			runtime.GC()
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := processCPU()
				drift, err := winkernel.Drifted(ctx, p)
				cpu += processCPU() - c0
				if err != nil || drift {
					b.Fatal(drift, err)
				}
			}
			b.StopTimer()
			reportCalls(b, f, b.N, cpu)
		})
	}
}
