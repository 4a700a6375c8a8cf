package userspacetest_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// The kit's verbs: a bind made to fail with FailOn fails that service port
// only and is retried; Dump shows the sockets and rules; Calls counts.
func TestFakesFaultsAndDump(t *testing.T) {
	fakes := userspacetest.NewFakes(v1.IPv4Protocol)
	p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: "node-a", NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.50.10")}}},
		fakes.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.OnServiceAdd(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	})
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	fakes.Sockets.FailOn("ListenTCP", 1, syscall.EADDRINUSE)
	var se *userspace.ServiceError
	if err := p.Sync(context.Background()); !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &se) {
		t.Fatalf("Sync with the bind failing = %v, want a *ServiceError with EADDRINUSE", err)
	}
	if strings.Contains(fakes.Dump(), "listen tcp") {
		t.Fatalf("a failed bind shows in Dump:\n%s", fakes.Dump())
	}
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := fakes.Sockets.CallsOf("ListenTCP"); n != 2 {
		t.Errorf("ListenTCP called %d times, want 2", n)
	}
	d := fakes.Dump()
	if !strings.Contains(d, "listen tcp 0.0.0.0:") || !strings.Contains(d, "-A KUBE-PORTALS-CONTAINER -d 10.96.0.10/32") {
		t.Errorf("Dump lacks the socket or the rule:\n%s", d)
	}
	p.Close()
	if strings.Contains(fakes.Dump(), "listen tcp") {
		t.Errorf("Dump still lists a socket after Close:\n%s", fakes.Dump())
	}
}
