package userspace

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// checkSyncState checks the bookkeeping that lets a partial sync skip
// unchanged services: byService lists exactly the ports in services, and
// the no-local-endpoint counts match a recount.
func (p *Proxier) checkSyncState() error {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	indexed := 0
	for nn, ports := range p.svc.byService {
		if len(ports) == 0 {
			return fmt.Errorf("byService[%s] is empty, not deleted", nn)
		}
		for i, name := range ports {
			if name.NamespacedName != nn {
				return fmt.Errorf("byService[%s] lists %s", nn, name)
			}
			if p.svc.services[name] == nil {
				return fmt.Errorf("byService[%s] lists %s, which has no state", nn, name)
			}
			if slices.Contains(ports[:i], name) {
				return fmt.Errorf("byService[%s] lists %s twice", nn, name)
			}
		}
		indexed += len(ports)
	}
	if indexed != len(p.svc.services) {
		return fmt.Errorf("byService indexes %d ports, services holds %d", indexed, len(p.svc.services))
	}
	var internal, external int
	for name, st := range p.svc.services {
		if st.plan == nil {
			return fmt.Errorf("%s has state but no plan", name)
		}
		if st.plan.noLocalInternal {
			internal++
		}
		if st.plan.noLocalExternal {
			external++
		}
	}
	if internal != p.svc.noLocalInternal || external != p.svc.noLocalExternal {
		return fmt.Errorf("no-local-endpoint counts internal=%d external=%d, recount gives %d and %d",
			p.svc.noLocalInternal, p.svc.noLocalExternal, internal, external)
	}
	return nil
}

func mustCheckSyncState(t *testing.T, p *Proxier) {
	t.Helper()
	if err := p.checkSyncState(); err != nil {
		t.Fatal(err)
	}
}

// A service port that failed is retried by the next sync even when
// nothing changed, and only it is planned again.
func TestPartialSyncRetriesFailingPortWithoutChange(t *testing.T) {
	// Another process holds the one proxy port of the range.
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	port := holder.Addr().(*net.TCPAddr).Port
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		PortRange: PortRange{Begin: port, End: port}})
	p.OnServiceAdd(makeService("dns", "10.96.0.11", v1.ProtocolUDP, 53))
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	var se *ServiceError
	if err := p.Sync(context.Background()); !errors.Is(err, ErrPortsExhausted) || !errors.As(err, &se) || se.Service != spn("web", v1.ProtocolTCP) {
		t.Fatalf("Sync = %v, want ErrPortsExhausted for ns/web", err)
	}
	mustCheckSyncState(t, p)
	dns := p.svc.services[spn("dns", v1.ProtocolUDP)].plan

	// Nothing changed and the port is still held: web fails again, alone.
	if err := p.Sync(context.Background()); !errors.Is(err, ErrPortsExhausted) {
		t.Fatalf("second Sync = %v, want ErrPortsExhausted", err)
	}
	if p.svc.lastPlans != 1 {
		t.Errorf("a sync with nothing changed planned %d service ports, want 1 (the failing one)", p.svc.lastPlans)
	}

	// The holder lets go; still nothing changed in the cluster.
	holder.Close()
	mustSync(t, p)
	if addr, ok := ProxyAddr(p, spn("web", v1.ProtocolTCP), false); !ok || int(addr.Port()) != port {
		t.Fatalf("ns/web not served once its port was free: %v %v", addr, ok)
	}
	if p.svc.lastPlans != 1 || p.svc.services[spn("dns", v1.ProtocolUDP)].plan != dns {
		t.Errorf("retry planned %d service ports (dns replanned: %v), want only ns/web", p.svc.lastPlans, p.svc.services[spn("dns", v1.ProtocolUDP)].plan != dns)
	}
	mustCheckSyncState(t, p)
	// Served now: the next sync plans nothing.
	mustSync(t, p)
	if p.svc.lastPlans != 0 {
		t.Errorf("a sync with nothing changed or failing planned %d service ports, want 0", p.svc.lastPlans)
	}
}

// twoPortService is "ns/name" with TCP ports "a" (80) and "b" (81), minus drop.
func twoPortService(name, clusterIP string, drop ...string) *v1.Service {
	s := makeService(name, clusterIP, v1.ProtocolTCP, 80)
	s.Spec.Ports = nil
	for i, port := range []string{"a", "b"} {
		if !slices.Contains(drop, port) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: port, Port: int32(80 + i), Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)})
		}
	}
	return s
}

// A partial sync tears down the port a changed service lost, and leaves
// that service's other port and other services' ports alone.
func TestPartialSyncTearsDownOnlyLostPorts(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	name := func(svc, port string) proxy.ServicePortName {
		return proxy.ServicePortName{NamespacedName: spn(svc, v1.ProtocolTCP).NamespacedName, Port: port, Protocol: v1.ProtocolTCP}
	}
	p.OnServiceAdd(twoPortService("m", "10.96.0.10"))
	p.OnServiceAdd(twoPortService("o", "10.96.0.11"))
	mustSync(t, p)
	addrs := map[proxy.ServicePortName]netip.AddrPort{}
	for _, l := range Listeners(p) {
		addrs[l.Service] = l.Addr
	}
	if len(addrs) != 4 {
		t.Fatalf("listeners %v, want 4 service ports", addrs)
	}
	mustCheckSyncState(t, p)

	p.OnServiceUpdate(twoPortService("m", "10.96.0.10"), twoPortService("m", "10.96.0.10", "b"))
	mustSync(t, p)
	mustCheckSyncState(t, p)
	if _, ok := ProxyAddr(p, name("m", "b"), false); ok {
		t.Error("ns/m:b still has a socket after the port was removed")
	}
	if c, err := net.Dial("tcp", addrs[name("m", "b")].String()); err == nil {
		c.Close()
		t.Error("ns/m:b's socket still accepts connections")
	}
	for _, n := range []proxy.ServicePortName{name("m", "a"), name("o", "a"), name("o", "b")} {
		if got, ok := ProxyAddr(p, n, false); !ok || got != addrs[n] {
			t.Errorf("%s: socket %v (%v), want it kept at %v", n, got, ok, addrs[n])
		}
	}
	if got := p.svc.byService[name("m", "a").NamespacedName]; !slices.Equal(got, []proxy.ServicePortName{name("m", "a")}) {
		t.Errorf("byService[ns/m] = %v, want only ns/m:a", got)
	}

	// The port comes back; then the whole service goes.
	p.OnServiceUpdate(twoPortService("m", "10.96.0.10", "b"), twoPortService("m", "10.96.0.10"))
	mustSync(t, p)
	mustCheckSyncState(t, p)
	if _, ok := ProxyAddr(p, name("m", "b"), false); !ok {
		t.Error("ns/m:b not served after the port came back")
	}
	p.OnServiceDelete(twoPortService("m", "10.96.0.10"))
	mustSync(t, p)
	mustCheckSyncState(t, p)
	if _, ok := p.svc.byService[name("m", "a").NamespacedName]; ok || len(p.svc.services) != 2 {
		t.Errorf("after deleting ns/m: byService has it %v, %d service ports with state, want 2", ok, len(p.svc.services))
	}
}

// A service that leaves the EndpointFilter's scope (its endpoints all
// outside our pod networks) is torn down by a partial sync, and served
// again when it comes back.
func TestPartialSyncFilterScope(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1"),
		Common: engine.Common{EndpointFilter: proxy.EndpointFilter{IncludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}})
	web, other := spn("web", v1.ProtocolTCP), spn("other", v1.ProtocolTCP)
	p.OnServiceAdd(makeService("web", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnServiceAdd(makeService("other", "10.96.0.11", v1.ProtocolTCP, 80))
	p.OnEndpointSliceAdd(makeSlice("web", v1.ProtocolTCP, 8080, epSpec{ip: "10.244.1.2"}))
	p.OnEndpointSliceAdd(makeSlice("other", v1.ProtocolTCP, 8080, epSpec{ip: "10.244.1.3"}))
	mustSync(t, p)
	otherAddr, ok := ProxyAddr(p, other, false)
	if _, webOK := ProxyAddr(p, web, false); !webOK || !ok {
		t.Fatalf("in scope: web served %v, other served %v", webOK, ok)
	}
	p.OnEndpointSliceUpdate(nil, makeSlice("web", v1.ProtocolTCP, 8080, epSpec{ip: "10.99.1.2"}))
	mustSync(t, p)
	mustCheckSyncState(t, p)
	if _, ok := ProxyAddr(p, web, false); ok {
		t.Error("web still served after leaving the filter's scope")
	}
	if got, ok := ProxyAddr(p, other, false); !ok || got != otherAddr {
		t.Errorf("other: %v %v, want kept at %v", got, ok, otherAddr)
	}
	p.OnEndpointSliceUpdate(nil, makeSlice("web", v1.ProtocolTCP, 8080, epSpec{ip: "10.244.1.4"}))
	mustSync(t, p)
	mustCheckSyncState(t, p)
	if _, ok := ProxyAddr(p, web, false); !ok {
		t.Error("web not served after coming back into scope")
	}
}

// The no-local-endpoint counts follow plan replacements and teardowns,
// including a node change (full sync) in between.
func TestPartialSyncNoLocalCounts(t *testing.T) {
	p := newTestProxier(t, Config{Capture: CaptureNone, ListenAddress: netip.MustParseAddr("127.0.0.1")})
	local := func(name string) *v1.Service {
		s := makeService(name, "10.96.0.10", v1.ProtocolTCP, 80, withExternalIPs("198.51.100.1"), withExternalLocal())
		s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		return s
	}
	want := func(internal, external int) {
		t.Helper()
		mustCheckSyncState(t, p)
		if p.svc.noLocalInternal != internal || p.svc.noLocalExternal != external {
			t.Errorf("no-local counts internal=%d external=%d, want %d and %d", p.svc.noLocalInternal, p.svc.noLocalExternal, internal, external)
		}
	}
	p.OnServiceAdd(local("a"))
	p.OnServiceAdd(local("b"))
	p.OnEndpointSliceAdd(makeSlice("a", v1.ProtocolTCP, 8080, epSpec{ip: "10.244.1.2", node: "elsewhere"}))
	mustSync(t, p)
	want(2, 2)
	p.OnEndpointSliceUpdate(nil, makeSlice("a", v1.ProtocolTCP, 8080, epSpec{ip: "10.244.1.2"}))
	mustSync(t, p)
	want(1, 1)
	p.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{v1.LabelTopologyZone: "z"}}})
	mustSync(t, p)
	want(1, 1)
	p.OnServiceDelete(local("b"))
	mustSync(t, p)
	want(0, 0)
	p.OnServiceUpdate(local("a"), makeService("a", "10.96.0.10", v1.ProtocolTCP, 80))
	p.OnEndpointSliceUpdate(nil, makeSlice("a", v1.ProtocolTCP, 8080))
	mustSync(t, p)
	want(0, 0)
}
