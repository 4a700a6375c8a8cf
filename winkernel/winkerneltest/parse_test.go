package winkerneltest_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// TestParseDumpRoundTripsGoldens: every golden HNS state of package
// winkernel reads back into a fake whose Dump is the same text.
func TestParseDumpRoundTripsGoldens(t *testing.T) {
	files, err := filepath.Glob("../testdata/*.golden")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, file := range files {
		if strings.HasSuffix(file, "-dryrun.golden") {
			continue // the dry run's text, not a Dump
		}
		n++
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := winkerneltest.NewFakesFromDump(v1.IPv4Protocol, string(data))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if got := f.Dump(); got != string(data) {
			t.Errorf("%s: round trip:\n%s\nwant\n%s", file, got, data)
		}
	}
	if n == 0 {
		t.Fatal("no golden files")
	}
}

// TestParseDumpRoundTripsEverything: a state with what Dump only writes
// when it is not the default (a second network, features, version,
// foreign remote names, missing backends, several VIPs, IPv6, an unknown
// protocol and distribution) survives Dump, ParseDump, Dump.
func TestParseDumpRoundTripsEverything(t *testing.T) {
	f := winkerneltest.NewFakes(v1.IPv4Protocol)
	f.SetNetwork(winkernel.NetworkOverlay, winkernel.RemoteSubnet{
		DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.50.11")})
	h := f.HNS
	other := h.AddNetwork(winkernel.Network{Name: "l2", Type: winkernel.NetworkL2Bridge,
		Features: winkernel.Features{DSR: true}, Version: winkernel.Version{Major: 13, Minor: 2}})
	a := f.AddPod("pod-a", netip.MustParseAddr("10.244.1.2"))
	b, _ := h.AddLocalEndpoint("l2", "", netip.MustParseAddr("172.16.0.2"))
	net0 := netID(t, f)
	r1, err := h.CreateEndpoint(net0, winkernel.Endpoint{Name: winkernel.RemoteEndpointNamePrefix + "10.244.2.2",
		IP: netip.MustParseAddr("10.244.2.2"), MAC: "02-11-0a-f4-02-02", ProviderAddress: netip.MustParseAddr("192.168.50.11"), Remote: true})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := h.CreateEndpoint(other, winkernel.Endpoint{Name: "someone-else", IP: netip.MustParseAddr("172.16.0.9"), Remote: true})
	if err != nil {
		t.Fatal(err)
	}
	v6, _ := h.AddLocalEndpoint(winkerneltest.NetworkName, "pod-v6", netip.MustParseAddr("fd00:10:244:1::2"))
	h.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{FrontendVIPs: []netip.Addr{netip.MustParseAddr("10.96.0.1")},
		SourceVIP: netip.MustParseAddr("10.244.1.250"), Protocol: winkernel.ProtocolTCP, InternalPort: 8080, ExternalPort: 80,
		EndpointIDs: []string{a, r1.ID}, Distribution: winkernel.DistributionSourceIP})
	h.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{Protocol: winkernel.ProtocolUDP, InternalPort: 53, ExternalPort: 30053,
		EndpointIDs: []string{b, r2.ID, "ep-gone"}, Flags: winkernel.FlagLocalRoutedVIP | winkernel.FlagVipExternalIP | winkernel.FlagDSR})
	h.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{FrontendVIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")},
		Protocol: 47, InternalPort: 1, ExternalPort: 1, EndpointIDs: []string{a}, Distribution: 7})
	h.AddLoadBalancerOutOfBand(winkernel.LoadBalancer{FrontendVIPs: []netip.Addr{netip.MustParseAddr("fd00:10:96::1")},
		SourceVIP: netip.MustParseAddr("fd00:10:244:1::fa"), Protocol: winkernel.ProtocolSCTP, InternalPort: 9, ExternalPort: 9,
		EndpointIDs: []string{v6}, Flags: winkernel.FlagIPv6 | winkernel.FlagUseMux | winkernel.FlagPreserveDIP | winkernel.FlagILB})
	dump := f.Dump()
	for _, want := range []string{"features=dsr version=13.2", "name=someone-else net=l2", "ep-gone(missing)", "vips=[192.0.2.1 192.0.2.2]", "proto-47", "dist=7"} {
		if !strings.Contains(dump, want) {
			t.Errorf("dump lacks %q:\n%s", want, dump)
		}
	}

	g, err := winkerneltest.NewFakesFromDump(v1.IPv4Protocol, dump)
	if err != nil {
		t.Fatal(err)
	}
	if got := g.Dump(); got != dump {
		t.Errorf("round trip:\n%s\nwant\n%s", got, dump)
	}
	if c := g.HNS.Calls(); len(c) != 0 {
		t.Errorf("parsing counted calls: %v", c)
	}
	// What the dump does not show takes the defaults.
	eps := g.HNS.Endpoints()
	for _, ep := range eps {
		if ep.IP == netip.MustParseAddr("10.244.2.2") && ep.Name != winkernel.RemoteEndpointNamePrefix+"10.244.2.2" {
			t.Errorf("remote endpoint named %q", ep.Name)
		}
	}
	n, err := g.HNS.GetNetworkByName(winkerneltest.NetworkName)
	if err != nil || !n.Features.ModifyLoadBalancer || n.Version.Major != 15 {
		t.Errorf("network %+v, %v: want NewFakes' features and version", n, err)
	}
}

func TestParseDumpErrors(t *testing.T) {
	for _, bad := range []string{
		"nonsense\n",
		"endpoint 10.0.0.1 local\n", // no network above
		"network n Overlay\nendpoint 10.0.0.x local\n",
		"network n Overlay\nendpoint 10.0.0.1 remote color=blue\n",
		"network n Overlay\nlb 10.96.0.1:80/tcp -> 10.0.0.1:80 src=none flags=none dist=none\n", // unknown backend
		"network n Overlay\nlb 10.96.0.1:80/icmp -> src=none flags=none dist=none\n",
		"network n Overlay\nlb 10.96.0.1:80/tcp -> src=none flags=fast dist=none\n",
		"network n Overlay remote 10.0.0.0/8\n",
		"network n Overlay features=warp\n",
		"network n Overlay\nnetwork n L2Bridge\n",
	} {
		f := winkerneltest.NewFakeHNS()
		err := f.ParseDump(bad)
		if err == nil {
			t.Errorf("ParseDump(%q): no error", bad)
			continue
		}
		if !strings.Contains(err.Error(), "line ") {
			t.Errorf("ParseDump(%q): %v, want the line named", bad, err)
		}
		if f.Dump() != "" {
			t.Errorf("ParseDump(%q) failed but left:\n%s", bad, f.Dump())
		}
	}
}

func netID(t *testing.T, f *winkerneltest.Fakes) string {
	t.Helper()
	n, err := f.HNS.GetNetworkByName(winkerneltest.NetworkName)
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}
