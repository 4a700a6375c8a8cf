package userspace_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/metrics"
	"github.com/svcproxy/svcproxy/userspace"
)

// idleListener is a TCP listener that never accepts anything, so the sync
// benchmark can serve thousands of services without thousands of sockets.
type idleListener struct {
	addr   *net.TCPAddr
	once   sync.Once
	closed chan struct{}
}

func (l *idleListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}
func (l *idleListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *idleListener) Addr() net.Addr { return l.addr }

type idleSockets struct {
	userspace.OSSockets
	mu   sync.Mutex
	next int
}

func (s *idleSockets) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	port := addr.Port()
	if port == 0 {
		s.next++
		port = uint16(1024 + s.next%60000)
	}
	return &idleListener{addr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr.Addr(), port)), closed: make(chan struct{})}, nil
}

// BenchmarkSyncOneChange: N TCP services with 10 endpoints each in
// CaptureIPTables mode over xtablestest.Fake, with metrics on (as
// minimal-proxy runs it); each op changes one endpoint of one service
// ("endpoint") or one service's port, which rewrites its capture rules
// ("service"), and syncs. A partial sync's cost should not grow with N
// apart from the fake's own copy of the table when rules change. Run with
//
//	go test -run '^$' -bench BenchmarkSyncOneChange -benchtime 200x -count 5 -benchmem ./userspace/
func BenchmarkSyncOneChange(b *testing.B) {
	for _, c := range []struct {
		kind string
		n    int
	}{{"endpoint", 1000}, {"endpoint", 10000}, {"service", 1000}, {"service", 10000}} {
		n := c.n
		b.Run(fmt.Sprintf("%s/%d", c.kind, n), func(b *testing.B) {
			fake := xtablestest.NewFake(v1.IPv4Protocol)
			p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", Metrics: metrics.New()}, HostIP: netip.MustParseAddr("192.168.50.10")},
				userspace.Interfaces{IPTables: fake, Sockets: &idleSockets{}})
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				b.StopTimer() // closing N services' sockets is not sync cost
				p.Close()
			}()
			slice := func(i, gen int) *discovery.EndpointSlice {
				sl := &discovery.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d-1", i), Labels: map[string]string{discovery.LabelServiceName: fmt.Sprintf("s%d", i)}},
					AddressType: discovery.AddressTypeIPv4,
					Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(v1.ProtocolTCP)}},
				}
				for e := range 10 {
					ip := netip.AddrFrom4([4]byte{10, byte(100 + e), byte(i >> 8), byte(i)})
					if e == 0 {
						ip = netip.AddrFrom4([4]byte{10, byte(gen % 50), byte(i >> 8), byte(i)})
					}
					sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{Addresses: []string{ip.String()}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}})
				}
				return sl
			}
			service := func(i, port int) *v1.Service {
				ip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
				return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)},
					Spec: v1.ServiceSpec{ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
						Ports: []v1.ServicePort{{Name: "http", Port: int32(port), Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}}}
			}
			for i := range n {
				p.OnServiceAdd(service(i, 80))
				p.OnEndpointSliceAdd(slice(i, 0))
			}
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			ctx := context.Background()
			if err := p.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			// The setup's garbage is not the sync's: collect it now, not
			// during the first timed ops.
			runtime.GC()
			b.ResetTimer()
			cpu0 := userspace.ProcessCPU()
			for op := range b.N {
				i := op % n
				if c.kind == "endpoint" {
					p.OnEndpointSliceUpdate(nil, slice(i, op+1))
				} else {
					p.OnServiceUpdate(service(i, 80+op/n%2), service(i, 81-op/n%2))
				}
				if err := p.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time is steadier than wall time on a shared machine.
			b.ReportMetric(float64(userspace.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
