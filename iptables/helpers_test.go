package iptables_test

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

const testNode = "node-a"

// svc builds a service with one TCP port "p80" (80) and the tweaks.
func svc(ns, name, clusterIP string, tweaks ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []v1.ServicePort{{Name: "p80", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, f := range tweaks {
		f(s)
	}
	return s
}

func nodePort(np int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
	}
}

func loadBalancer(np int32, ingress string, ranges ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = np
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ingress}}
		s.Spec.LoadBalancerSourceRanges = ranges
	}
}

func externalIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func etpLocal(hc int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

func itpLocal(s *v1.Service) {
	p := v1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

func affinity(seconds int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(seconds)}}
	}
}

func udp(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolUDP }

// ep is one endpoint for slice(): ip, and node ("" = another node).
type ep struct {
	ip          string
	node        string
	terminating bool
}

// slice builds the EndpointSlice "<name>-1" with port p80/80 (TCP unless proto).
func slice(ns, name string, proto v1.Protocol, eps ...ep) *discovery.EndpointSlice {
	fam := discovery.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0].ip, ":") {
		fam = discovery.AddressTypeIPv6
	}
	if proto == "" {
		proto = v1.ProtocolTCP
	}
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: fam,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("p80"), Port: ptr.To[int32](80), Protocol: ptr.To(proto)}},
	}
	for _, e := range eps {
		node := e.node
		if node == "" {
			node = "node-b"
		}
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses: []string{e.ip},
			NodeName:  ptr.To(node),
			Conditions: discovery.EndpointConditions{
				Ready:       ptr.To(!e.terminating),
				Serving:     ptr.To(true),
				Terminating: ptr.To(e.terminating),
			},
		})
	}
	return s
}

func newTestProxier(t testing.TB, cfg Config, family v1.IPFamily) (*Proxier, *iptablestest.Fake) {
	t.Helper()
	fake := iptablestest.NewFake(family)
	if cfg.NodeName == "" {
		cfg.NodeName = testNode
	}
	// The fake sysctl: a test never writes the host's route_localnet.
	p, err := NewProxier(cfg, Interfaces{IPTables: fake, Sysctl: iptablestest.NewSysctl(nil)})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	return p, fake
}

func mustSync(t testing.TB, p *Proxier) {
	t.Helper()
	if err := p.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// ownRules returns the fake's dump restricted to what this engine owns
// (the KUBE-* chains and the jumps into them), with the order of the
// per-service rules in the shared dispatch chains normalized (it carries no
// meaning, and a partial sync inserts where a full sync appends).
func normalizedDump(d string) string {
	lines := strings.Split(strings.TrimSpace(d), "\n")
	var out []string
	table := ""
	// Collect per table, sort the dispatch rules of the shared chains.
	var block []string
	flush := func() {
		sort.SliceStable(block, func(i, j int) bool {
			ki, kj := sortKey(table, block[i]), sortKey(table, block[j])
			if ki.chain != kj.chain || !ki.shared || !kj.shared {
				return false
			}
			return ki.text < kj.text
		})
		out = append(out, block...)
		block = block[:0]
	}
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
			out = append(out, l)
		case l == "COMMIT":
			flush()
			out = append(out, l)
		case strings.HasPrefix(l, "-A "):
			block = append(block, l)
		default:
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

type key struct {
	chain  string
	shared bool
	text   string
}

func sortKey(table, line string) key {
	f := strings.Fields(line)
	chain := f[1]
	shared := false
	switch table + " " + chain {
	case "nat KUBE-SERVICES", "nat KUBE-NODEPORTS", "filter KUBE-SERVICES", "filter KUBE-EXTERNAL-SERVICES",
		"filter KUBE-NODEPORTS", "filter KUBE-PROXY-FIREWALL":
		shared = true
	}
	if strings.Contains(line, "NOTE: this must be the last rule") {
		shared = false
	}
	return key{chain, shared, line}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

var _ = fmt.Sprint

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// newFakeWithBase returns a fake holding only the base chains and jump
// rules (as a full sync's EnsureChain/EnsureRule calls leave them), for
// replaying a Plan.
func newFakeWithBase(t testing.TB, family v1.IPFamily, cfg Config) *iptablestest.Fake {
	t.Helper()
	f := iptablestest.NewFake(family)
	base := Config{Common: engine.Common{NodeName: testNode}, LocalhostNodePorts: cfg.LocalhostNodePorts}
	p, err := NewProxier(base, Interfaces{IPTables: f, Sysctl: iptablestest.NewSysctl(nil)})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	return f
}

// lineDiff shows the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		w[l]++
	}
	g := map[string]int{}
	for _, l := range strings.Split(got, "\n") {
		g[l]++
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if g[l] < w[l] {
			fmt.Fprintf(&b, "- %s\n", l)
			w[l]--
		}
	}
	w = map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		w[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		if w[l] == 0 {
			fmt.Fprintf(&b, "+ %s\n", l)
		} else {
			w[l]--
		}
	}
	return b.String()
}

func newBareFake() *iptablestest.Fake { return iptablestest.NewFake(v1.IPv4Protocol) }

// isBaseRestore reports whether a restore input is ensureBase's (base
// chains, jump rules and canaries: only -N and -I lines), not a payload.
func isBaseRestore(data []byte) bool {
	base := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case l == "" || l == "COMMIT" || strings.HasPrefix(l, "*"):
		case strings.HasPrefix(l, "-N ") || strings.HasPrefix(l, "-I "):
			base = true
		default:
			return false
		}
	}
	return base
}
