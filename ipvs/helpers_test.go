package ipvs_test

import (
	"context"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const testNode = "node-a"

var (
	nodeIP  = netip.MustParseAddr("192.168.0.10")
	nodeIP6 = netip.MustParseAddr("fd00::10")
)

// env is a Proxier over the fakes, with a fake clock.
type env struct {
	p      *ipvs.Proxier
	f      *ipvstest.Fakes
	ipvs   *ipvstest.IPVS
	ipset  *ipvstest.IPSet
	nl     *ipvstest.Netlink
	ipt    *xtablestest.Fake
	sysctl *ipvstest.Sysctl
	ct     *fakeConntrack
	clock  *clocktesting.FakeClock
	cfg    ipvs.Config
}

type fakeConntrack struct{ calls int }

func (f *fakeConntrack) DeleteUDP(ipv6 bool, filters []ipvs.ConntrackFilter) (uint, error) {
	f.calls++
	return uint(len(filters)), nil
}

// config is an ipvs.Config with the common fields set.
func config(c engine.Common) ipvs.Config { return ipvs.Config{Common: c} }

func newEnv(t testing.TB, cfg ipvs.Config) *env {
	t.Helper()
	return newEnvFor(t, proxytest.Topology{NodeIP: nodeIP, UplinkInterface: "eth0"}, cfg)
}

// newEnvFor builds the fakes for a node of topo: its uplink holds NodeIP,
// the pod-facing bridge PodGateway.
func newEnvFor(t testing.TB, topo proxytest.Topology, cfg ipvs.Config) *env {
	t.Helper()
	if cfg.IPFamily == "" {
		cfg.IPFamily = v1.IPv4Protocol
	}
	f := ipvstest.NewFakes(cfg.IPFamily)
	e := &env{
		f:      f,
		ipvs:   f.IPVS,
		ipset:  f.IPSet,
		nl:     f.Netlink,
		ipt:    f.IPTables,
		sysctl: f.Sysctl,
		ct:     &fakeConntrack{},
		clock:  clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
	if topo.NodeIP == nodeIP {
		e.nl.AddLink("eth0", nodeIP, nodeIP6)
	} else {
		e.nl.AddLink(topo.UplinkInterface, topo.NodeIP)
		if topo.PodGateway.IsValid() {
			e.nl.AddLink("cbr0", topo.PodGateway)
		}
	}
	return e.withProxier(t, cfg)
}

// withProxier (re)builds the proxier over the same fakes: a restart.
func (e *env) withProxier(t testing.TB, cfg ipvs.Config) *env {
	t.Helper()
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	if cfg.Conntrack == nil {
		cfg.Conntrack = e.ct
	}
	e.cfg = cfg
	p, err := ipvs.NewProxier(cfg, e.f.Interfaces())
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

func (e *env) sync(t testing.TB) {
	t.Helper()
	if err := e.p.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// last is what the last sync did.
func (e *env) last() engine.SyncOutcome { return e.p.Stats().Last }

// draining counts the real servers at weight 0 (waiting for deletion).
func (e *env) draining() int {
	n := 0
	vss, _ := e.ipvs.GetVirtualServers()
	for _, vs := range vss {
		rss, _ := e.ipvs.GetRealServers(vs)
		for _, rs := range rss {
			if rs.Weight == 0 {
				n++
			}
		}
	}
	return n
}

// dump is the whole node state the proxier owns.
func (e *env) dump() string { return e.f.Dump() }

func (e *env) mutations() int { return e.f.Mutations() }
func (e *env) deletions() int { return e.f.Deletions() }
func (e *env) resetCalls()    { e.f.ResetCalls() }

func (e *env) tracer() *ipvstest.Tracer {
	return ipvstest.NewTracer(e.f, ipvstest.TracerConfig{MasqueradeBit: e.cfg.MasqueradeBit})
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("state differs from %s (run with -update to accept):\n%s", path, lineDiff(string(want), got))
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	inW := map[string]int{}
	for _, l := range w {
		inW[l]++
	}
	inG := map[string]int{}
	for _, l := range g {
		inG[l]++
	}
	for _, l := range w {
		if inG[l] == 0 {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if inW[l] == 0 {
			b.WriteString("+ " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(same lines, different order)\n" + got
	}
	return b.String()
}

// ---- objects

type svcOpt func(*v1.Service)

func service(ns, name, clusterIP string, port int32, opts ...svcOpt) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []v1.ServicePort{{Name: "p", Port: port, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(port)}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func withNodePort(np int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
	}
}

func withLB(np int32, ingress string, ranges ...string) svcOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = np
		s.Spec.LoadBalancerSourceRanges = ranges
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ingress}}
	}
}

func withExternalIPs(ips ...string) svcOpt {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func withETPLocal(hc int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

func withAffinity(sec int32) svcOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(sec)}}
	}
}

func withProto(p v1.Protocol) svcOpt { return func(s *v1.Service) { s.Spec.Ports[0].Protocol = p } }

func withScheduler(name string) svcOpt {
	return func(s *v1.Service) { s.Annotations = map[string]string{ipvs.AnnotationScheduler: name} }
}

type ep struct {
	ip          string
	node        string
	ready       bool
	terminating bool
}

func ready(ip, node string) ep { return ep{ip: ip, node: node, ready: true} }

func slice(ns, name string, port int32, proto v1.Protocol, eps ...ep) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-abc", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(port), Protocol: ptr.To(proto)}},
	}
	for _, e := range eps {
		if strings.Contains(e.ip, ":") {
			es.AddressType = discovery.AddressTypeIPv6
		}
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses:  []string{e.ip},
			NodeName:   ptr.To(e.node),
			Conditions: discovery.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.ready || e.terminating), Terminating: ptr.To(e.terminating)},
		})
	}
	return es
}

func (e *env) synced() {
	e.p.OnServiceSynced()
	e.p.OnEndpointSlicesSynced()
}
