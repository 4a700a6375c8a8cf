package userspace

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

const testNode = "node-a"

// svcOpt edits a test service.
type svcOpt func(*v1.Service)

// makeService returns a service "ns/name" with one port "p" (service port
// port, target port "p").
func makeService(name string, clusterIP string, proto v1.Protocol, port int, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports: []v1.ServicePort{{
				Name: "p", Port: int32(port), Protocol: proto, TargetPort: intstr.FromString("p"),
			}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withNodePort(np int) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = int32(np)
	}
}

func withAffinity(seconds int) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(int32(seconds))}}
	}
}

func withExternalIPs(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func withExternalLocal() svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
}

// epSpec is one endpoint of a test slice.
type epSpec struct {
	ip          string
	node        string
	notReady    bool
	terminating bool
}

func makeSlice(service string, proto v1.Protocol, port int, eps ...epSpec) *discovery.EndpointSlice {
	fam := discovery.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0].ip, ":") {
		fam = discovery.AddressTypeIPv6
	}
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: service + "-1",
			Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: fam,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(int32(port)), Protocol: ptr.To(proto)}},
	}
	for _, e := range eps {
		node := e.node
		if node == "" {
			node = testNode
		}
		sl.Endpoints = append(sl.Endpoints, discovery.Endpoint{
			Addresses: []string{e.ip},
			Conditions: discovery.EndpointConditions{
				Ready: ptr.To(!e.notReady && !e.terminating), Serving: ptr.To(!e.notReady), Terminating: ptr.To(e.terminating),
			},
			NodeName: ptr.To(node),
		})
	}
	return sl
}

func spn(name string, proto v1.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Port: "p", Protocol: proto}
}

// newTestProxier returns a synced, empty proxier closed at the end of the test.
func newTestProxier(t testing.TB, cfg Config, ifs ...Interfaces) *Proxier {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	if tt, ok := t.(*testing.T); ok && cfg.Logger.GetSink() == nil {
		cfg.Logger = testr.NewWithOptions(tt, testr.Options{Verbosity: 0})
	}
	var in Interfaces
	if len(ifs) > 0 {
		in = ifs[0]
	}
	p, err := NewProxier(cfg, in)
	if err != nil {
		t.Fatalf("NewProxier: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	return p
}

func mustSync(t testing.TB, p *Proxier) {
	t.Helper()
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// backend is a TCP and UDP server on ip:port that answers each line (TCP)
// or datagram (UDP) with "<ip>:<text>".
type backend struct {
	ip   string
	ln   net.Listener
	pc   net.PacketConn
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

func startBackend(t testing.TB, ip string, port int) *backend {
	t.Helper()
	b := &backend{ip: ip, open: map[net.Conn]bool{}}
	addr := net.JoinHostPort(ip, fmt.Sprint(port))
	var err error
	if b.ln, err = net.Listen("tcp", addr); err != nil {
		t.Fatalf("backend listen: %v", err)
	}
	if b.pc, err = net.ListenPacket("udp", addr); err != nil {
		t.Fatalf("backend listen udp: %v", err)
	}
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		for {
			c, err := b.ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.open[c] = true
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer func() { b.mu.Lock(); delete(b.open, c); b.mu.Unlock(); c.Close() }()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, ip+":"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		defer b.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := b.pc.ReadFrom(buf)
			if err != nil {
				return
			}
			b.pc.WriteTo(append([]byte(ip+":"), buf[:n]...), from)
		}
	}()
	t.Cleanup(b.stop)
	return b
}

// resetAll resets every open connection (the backend "dies").
func (b *backend) resetAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.open {
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

func (b *backend) stop() {
	b.ln.Close()
	b.pc.Close()
	b.resetAll()
	b.wg.Wait()
}

// freePort returns a port free for TCP and UDP on 127.0.0.1 and the other addresses.
func freePort(t testing.TB, ips ...string) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for _, ip := range append([]string{"127.0.0.1"}, ips...) {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, fmt.Sprint(port)))
			if err != nil {
				ok = false
				break
			}
			pc.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// askTCP connects to addr, sends one line and returns the answer.
func askTCP(addr netip.AddrPort, msg string) (string, error) {
	c, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

// askUDP sends one datagram from conn and returns the answer.
func askUDP(conn *net.UDPConn, to netip.AddrPort, msg string) (string, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.WriteToUDPAddrPort([]byte(msg), to); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, _, err := conn.ReadFromUDPAddrPort(buf)
	return string(buf[:n]), err
}

// eventually polls cond every 5ms, at most 1000 times.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// countFDs counts this process's open file descriptors (Linux), or -1.
func countFDs() int {
	// Go keeps spliced pipes in a sync.Pool whose entries are closed by
	// finalizers: collect them first.
	runtime.GC()
	runtime.GC()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// settle waits until the goroutine count drops to at most want.
func settleGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 400 && n > want; i++ {
		time.Sleep(5 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

var errNoAnswer = errors.New("no answer")
