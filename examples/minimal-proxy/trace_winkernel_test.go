package main

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// TestTraceWinkernel: the winkernel engine syncs its fake HNS through
// every step of the conformance table's scenarios; at every check, trace
// over the HNS dump (--from-dump, as on Linux) and over the HNS listing
// copied into a new fake (as on Windows) answers as winkerneltest's
// tracer over the engine's fake itself, the origin derived from the
// source address as trace derives it.
func TestTraceWinkernel(t *testing.T) {
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(family)
		subnet := winkernel.RemoteSubnet{DestinationPrefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: netip.MustParseAddr("192.168.50.11")}
		sourceVIP := netip.MustParseAddr("10.244.1.250")
		if family == v1.IPv6Protocol {
			subnet = winkernel.RemoteSubnet{DestinationPrefix: netip.MustParsePrefix("fd00:10:244:2::/64"), ProviderAddress: netip.MustParseAddr("fd00:50::11")}
			sourceVIP = netip.MustParseAddr("fd00:10:244:1::fa")
		}
		for _, sc := range proxytest.Scenarios(topo) {
			if sc.Options.MasqueradeAll {
				continue // winkernel has no masquerade-all
			}
			t.Run(string(family)+"/"+sc.Name, func(t *testing.T) {
				f := winkerneltest.NewFakes(family)
				f.SetNetwork(winkernel.NetworkOverlay, subnet)
				for _, pod := range append(append([]proxytest.Pod{}, topo.LocalPods...), topo.ClientPod) {
					f.AddPod(pod.Name, pod.IP)
				}
				nodeIPs := []netip.Addr{topo.NodeIP}
				p, err := winkernel.NewProxier(winkernel.Config{
					Common:      enginebase.Common{NodeName: topo.NodeName, NodeIPs: nodeIPs, IPFamily: family},
					NetworkName: winkerneltest.NetworkName, SourceVIP: sourceVIP, HostMAC: "00-15-5d-aa-bb-cc",
					ForwardHealthCheckVIP: true,
				}, f.Interfaces())
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				feeder := proxytest.NewFeeder(p)
				dumpFile := filepath.Join(t.TempDir(), "hns.txt")
				checks := 0
				for i, st := range sc.Steps {
					if err := feeder.Apply(st.Objects); err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						feeder.Synced()
					}
					if err := p.Sync(context.Background()); err != nil {
						t.Fatalf("step %s: %v", st.Name, err)
					}
					if err := os.WriteFile(dumpFile, []byte(f.Dump()), 0o644); err != nil {
						t.Fatal(err)
					}
					listed, notes, err := winkerneltest.NewFakesFromHNS(family, f.HNS, winkerneltest.NetworkName)
					if err != nil || len(notes) > 0 {
						t.Fatalf("step %s: copying the HNS listing: %v %q", st.Name, err, notes)
					}
					for _, c := range st.Checks {
						want, err := winkerneltest.NewTracer(f, winkerneltest.TracerConfig{NodeIPs: nodeIPs}).Trace(c.Packet)
						if err != nil {
							t.Fatal(err)
						}
						o := &traceOptions{mode: modeKernelspace, fromDump: dumpFile, nodeIPs: nodeIPs}
						pkt := c.Packet
						for how, trace := range map[string]func() (*traceReport, error){
							"dump":    func() (*traceReport, error) { return traceWinkernel(o, pkt) },
							"listing": func() (*traceReport, error) { return traceHNS(listed, o, pkt, nodeIPs) },
						} {
							rep, err := trace()
							if err != nil {
								t.Fatalf("step %s check %s over the %s: %v", st.Name, c.Name, how, err)
							}
							if rep.Packet.Origin != pkt.Origin.String() {
								t.Errorf("step %s check %s over the %s: origin %s, want %s", st.Name, c.Name, how, rep.Packet.Origin, pkt.Origin)
							}
							got, err := reportResult(rep)
							if err != nil {
								t.Fatal(err)
							}
							if !reflect.DeepEqual(got.Normalize(), want.Normalize()) {
								t.Errorf("step %s check %s over the %s:\n  packet: %s\n  trace:  %s\n  tracer: %s\n%s", st.Name, c.Name, how, pkt, got, want, f.Dump())
							}
							checks++
						}
					}
				}
				if checks == 0 && len(sc.Steps) > 0 && len(sc.Steps[0].Checks) > 0 {
					t.Error("no check compared")
				}
				t.Logf("%d traces agreed with the tracer", checks)
			})
		}
	}
}

// TestTraceWinkernelReport: the report over an HNS dump names the load
// balancer and its endpoints, with even probabilities.
func TestTraceWinkernelReport(t *testing.T) {
	dump := "network vxlan0 Overlay remote 10.244.2.0/24 via 192.168.50.11\n" +
		"endpoint 10.244.1.2 local name=pod-a1\n" +
		"endpoint 10.244.2.2 remote pa=192.168.50.11 mac=02-11-0a-f4-02-02\n" +
		"lb 10.96.0.10:80/tcp -> 10.244.1.2:8080 10.244.2.2:8080 src=10.244.1.250 flags=none dist=none\n"
	file := filepath.Join(t.TempDir(), "hns.txt")
	if err := os.WriteFile(file, []byte(dump), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	code := runTrace(context.Background(), []string{"--from-dump", file, "--node-ip", "192.168.1.10", "--from", "10.244.1.2", "--to", "10.96.0.10:80"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("trace exited %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"packet:    pod 10.244.1.2 -> 10.96.0.10:80/tcp",
		"result:    forwarded, not masqueraded",
		" 50.0%  10.244.2.2:8080",
		"hns: load balancer ",
		"hns:   -> endpoint 10.244.2.2:8080 (remote via 192.168.50.11",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
