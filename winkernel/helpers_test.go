package winkernel_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// remoteSubnet and sourceVIP place the conformance topology's remote pods
// behind a remote node, and the source VIP inside this node's pod subnet.
func remoteSubnet(topo proxytest.Topology) winkernel.RemoteSubnet {
	if topo.Family == v1.IPv6Protocol {
		return winkernel.RemoteSubnet{DestinationPrefix: netip.MustParsePrefix("fd00:10:244:2::/64"), ProviderAddress: netip.MustParseAddr("fd00:50::11"), IsolationID: 4096}
	}
	return winkernel.RemoteSubnet{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.50.11"), IsolationID: 4096}
}

func sourceVIP(topo proxytest.Topology) netip.Addr {
	if topo.Family == v1.IPv6Protocol {
		return netip.MustParseAddr("fd00:10:244:1::fa")
	}
	return netip.MustParseAddr("10.244.1.250")
}

// newTopoFakes returns fakes for topo: an overlay (or l2bridge) network
// with the remote node's subnet, a local endpoint per local pod and the
// client pod, and the root endpoint cbr0 at the pod gateway.
func newTopoFakes(topo proxytest.Topology, typ winkernel.NetworkType) *winkerneltest.Fakes {
	f := winkerneltest.NewFakes(topo.Family)
	if typ.IsOverlay() {
		f.SetNetwork(typ, remoteSubnet(topo))
	} else {
		f.SetNetwork(typ)
	}
	for _, pod := range append(append([]proxytest.Pod{}, topo.LocalPods...), topo.ClientPod) {
		f.AddPod(pod.Name, pod.IP)
	}
	f.AddPod("cbr0", topo.PodGateway)
	return f
}

func topoConfig(topo proxytest.Topology) winkernel.Config {
	return winkernel.Config{
		Common:                engine.Common{NodeName: topo.NodeName, NodeIPs: []netip.Addr{topo.NodeIP}, IPFamily: topo.Family},
		NetworkName:           winkerneltest.NetworkName,
		SourceVIP:             sourceVIP(topo),
		HostMAC:               "00-15-5d-aa-bb-cc",
		ForwardHealthCheckVIP: true,
	}
}

func newTopoProxier(t testing.TB, topo proxytest.Topology, f *winkerneltest.Fakes, mutate func(*winkernel.Config)) *winkernel.Proxier {
	cfg := topoConfig(topo)
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := winkernel.NewProxier(cfg, f.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func topoTracer(topo proxytest.Topology, f *winkerneltest.Fakes) *winkerneltest.Tracer {
	return winkerneltest.NewTracer(f, winkerneltest.TracerConfig{
		NodeIPs: []netip.Addr{topo.NodeIP},
	})
}
