//go:build linux

package nftables_test

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/proxy/proxytest/conformance"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// goldenObjects are the golden table's services: a ClusterIP, a NodePort
// with affinity, a LoadBalancer with source ranges and eTP Local, an iTP
// Local service, and one without endpoints (the last has no slice).
func goldenObjects(topo proxytest.Topology) ([]*v1.Service, []*discovery.EndpointSlice) {
	a1, b1 := topo.LocalPods[0], topo.RemotePods[0]
	http := []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080}}
	slicePorts := []proxytest.SlicePortSpec{{Name: "http", Port: 8080}}
	eps := []proxytest.EndpointSpec{{Pod: a1}, {Pod: b1}}
	svcs := []*v1.Service{
		proxytest.MakeService(topo, "web", topo.ServiceIP(1), http, nil),
		proxytest.MakeService(topo, "sticky", topo.ServiceIP(2), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080, NodePort: 30080}}, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeNodePort
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
		}),
		proxytest.MakeService(topo, "lb", topo.ServiceIP(3), []proxytest.ServicePortSpec{{Name: "http", Port: 80, TargetPort: 8080, NodePort: 30081}}, func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 32000
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/25"}
			s.Spec.ExternalIPs = []string{topo.ExternalIP(1).String()}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: topo.LoadBalancerIP(1).String()}}
		}),
		proxytest.MakeService(topo, "itp", topo.ServiceIP(4), http, func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		}),
		proxytest.MakeService(topo, "empty", topo.ServiceIP(5), http, nil),
	}
	var slices []*discovery.EndpointSlice
	for _, s := range svcs {
		if s.Name != "empty" {
			slices = append(slices, proxytest.MakeSlice(topo, s.Name, "1", slicePorts, eps...))
		}
	}
	return svcs, slices
}

// TestGoldenTable pins the whole table for representative services: a
// ClusterIP, a NodePort with affinity, a LoadBalancer with source ranges
// and eTP Local, an iTP Local service, and one without endpoints.
func TestGoldenTable(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	svcs, slices := goldenObjects(topo)
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, conformanceConfig(topo, proxytest.Options{}))
	for _, s := range svcs {
		p.OnServiceAdd(s)
	}
	for _, s := range slices {
		p.OnEndpointSliceAdd(s)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	got := regexp.MustCompile(`svcproxy:[0-9a-z]+`).ReplaceAllString(fakes.Dump(), "svcproxy:HASH")
	const file = "testdata/golden.nft"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("table differs from %s (rerun with -update after checking):\n%s", file, got)
	}
}

// TestShuffledWalk runs the conformance steps in random orders on one
// engine per scenario: every transition converges.
func TestShuffledWalk(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		t.Run(string(fam), func(t *testing.T) {
			topo := proxytest.DefaultTopology(fam)
			conformance.RunScenarios(t, topo, proxytest.Shuffle(proxytest.Scenarios(topo), 12, 3),
				conformance.Harness{New: conformanceHarness, Quirks: conformanceQuirks})
		})
	}
}

// TestAdoptUpstreamTable: a table written without our content hashes (as
// upstream kube-proxy writes it) is adopted in one full sync that
// rewrites its chains but keeps its map elements; a restart then writes
// nothing.
func TestAdoptUpstreamTable(t *testing.T) {
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(30, 3)
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)
	ours := fakes.Dump()
	upstream := regexp.MustCompile(` comment "svcproxy:[0-9a-z]+"| svcproxy:[0-9a-z]+`).ReplaceAllString(ours, "")

	adopted := nftablestest.NewFakes(v1.IPv4Protocol)
	if err := adopted.NFTables.ParseDump(upstream); err != nil {
		t.Fatal(err)
	}
	q := newTestProxier(t, adopted, testConfig())
	c.feed(q)
	out := mustSync(t, q)
	if out.Result.Writes == 0 {
		t.Fatal("adoption wrote nothing")
	}
	if got := adopted.Dump(); got != ours {
		t.Errorf("adopted table differs from ours:\n%s", got)
	}
	r := newTestProxier(t, adopted, testConfig())
	c.feed(r)
	if out := mustSync(t, r); out.Result.Writes != 0 {
		t.Errorf("restart after adoption wrote %d", out.Result.Writes)
	}
}

var _ = nftables.TableName

// TestHairpinEntriesShared: services selecting the same local endpoint
// share its hairpin-connections entry, which stays until the last of them
// goes (partial syncs), and a restart writes nothing.
func TestHairpinEntriesShared(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	svcs, slices := goldenObjects(topo)
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, conformanceConfig(topo, proxytest.Options{}))
	for _, s := range svcs {
		p.OnServiceAdd(s)
	}
	for _, s := range slices {
		p.OnEndpointSliceAdd(s)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	const entry = "add element ip kube-proxy hairpin-connections { 10.244.1.2 . 10.244.1.2 . tcp . 8080 }"
	if !strings.Contains(fakes.Dump(), entry) {
		t.Fatalf("no hairpin entry for the local endpoint:\n%s", fakes.Dump())
	}
	for i, s := range slices {
		p.OnServiceDelete(svcs[i])
		p.OnEndpointSliceDelete(s)
		if out := mustSync(t, p); out.Full {
			t.Fatalf("deleting %s: a full sync", s.Name)
		}
		last := i == len(slices)-1
		if has := strings.Contains(fakes.Dump(), entry); has == last {
			t.Errorf("after deleting %s (the last user: %v): hairpin entry present = %v", svcs[i].Name, last, has)
		}
	}
	if strings.Contains(fakes.Dump(), "add element ip kube-proxy hairpin-connections") {
		t.Errorf("hairpin entries left:\n%s", fakes.Dump())
	}
}
