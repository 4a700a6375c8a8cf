package winkerneltest_test

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// TestNewFakesFromHNS: a copy of an HNS listed with winkernel.ListState
// dumps as the original (IDs aside), and a load balancer's reference to an
// endpoint of another network is left out with a note.
func TestNewFakesFromHNS(t *testing.T) {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	local := f.AddPod("pod1", pod1)
	remote, err := f.HNS.CreateEndpoint(mustNetworkID(t, f), winkernel.Endpoint{
		Name: winkernel.RemoteEndpointNamePrefix + "10.244.2.2", IP: netip.MustParseAddr("10.244.2.2"), Remote: true,
		ProviderAddress: netip.MustParseAddr("192.168.50.11"), MAC: "02-11-0a-f4-02-02",
	})
	if err != nil {
		t.Fatal(err)
	}
	f.HNS.AddLoadBalancerOutOfBand(newLB(local, remote.ID))
	f.HNS.AddNetwork(winkernel.Network{Name: "other", Type: winkernel.NetworkL2Bridge})
	elsewhere, err := f.HNS.AddLocalEndpoint("other", "pod-x", netip.MustParseAddr("10.250.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	udp := newLB(local, elsewhere)
	udp.Protocol = winkernel.ProtocolUDP
	f.HNS.AddLoadBalancerOutOfBand(udp)

	c, notes, err := winkerneltest.NewFakesFromHNS(v1.IPv4Protocol, f.HNS, winkerneltest.NetworkName)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], elsewhere) {
		t.Errorf("notes %q, want one naming %s", notes, elsewhere)
	}
	// The original without the other network and its endpoint, and with
	// the UDP LB's reference to it dropped.
	want := winkerneltest.NewFakes(v1.IPv4Protocol)
	id := want.AddPod("pod1", pod1)
	if _, err := want.HNS.CreateEndpoint(mustNetworkID(t, want), remote); err != nil {
		t.Fatal(err)
	}
	want.HNS.AddLoadBalancerOutOfBand(newLB(id, mustEndpointID(t, want, "10.244.2.2")))
	udp = newLB(id)
	udp.Protocol = winkernel.ProtocolUDP
	want.HNS.AddLoadBalancerOutOfBand(udp)
	if got, w := c.Dump(), want.Dump(); got != w {
		t.Errorf("copy dumps as\n%s\nwant\n%s", got, w)
	}

	if _, _, err := winkerneltest.NewFakesFromHNS(v1.IPv4Protocol, f.HNS, "no-such-network"); err == nil {
		t.Error("a network that does not exist: no error")
	}
}

func mustNetworkID(t *testing.T, f *winkerneltest.Fakes) string {
	t.Helper()
	n, err := f.HNS.GetNetworkByName(winkerneltest.NetworkName)
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}

func mustEndpointID(t *testing.T, f *winkerneltest.Fakes, ip string) string {
	t.Helper()
	eps, err := f.HNS.ListEndpoints(mustNetworkID(t, f))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if ep.IP.String() == ip {
			return ep.ID
		}
	}
	t.Fatalf("no endpoint %s", ip)
	return ""
}
