package userspace_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables/xtablestest"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
	"github.com/svcproxy/svcproxy/userspace"
)

var proxyPortRE = regexp.MustCompile(`(--to-ports |--to-destination \S+:|--dport )(\d+)`)

// canonical renders what a proxier programmed with its proxy ports
// (kernel-chosen, so different between two proxiers) replaced by the
// service they belong to: the rules and, per socket, service, set and
// endpoints.
func canonical(t *testing.T, p *userspace.Proxier, fake *xtablestest.Fake) string {
	t.Helper()
	owner := map[string]string{}
	var b strings.Builder
	for _, l := range userspace.Listeners(p) {
		tag := fmt.Sprintf("<%s/%s local=%v>", l.Service, l.Protocol, l.Local)
		owner[fmt.Sprint(l.Addr.Port())+"/"+string(l.Protocol)] = tag
		fmt.Fprintf(&b, "socket %s -> %v sticky=%v\n", tag, l.Endpoints, l.Affinity.ClientIP)
	}
	// Rules of different services may sit in any order (incremental
	// writes append), so our chains' rules are compared as a sorted list.
	var ours []string
	for _, line := range strings.Split(fake.Dump(), "\n") {
		proto := "TCP"
		if strings.Contains(line, " -p udp ") {
			proto = "UDP"
		}
		line = proxyPortRE.ReplaceAllStringFunc(line, func(m string) string {
			sub := proxyPortRE.FindStringSubmatch(m)
			if tag, ok := owner[sub[2]+"/"+proto]; ok {
				return sub[1] + tag
			}
			return m
		})
		if strings.HasPrefix(line, "-A KUBE-") {
			ours = append(ours, line)
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	slices.Sort(ours)
	for _, line := range ours {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestStatesConverge walks a proxier through the conformance table's
// states in random order and checks after every step that it programmed
// exactly what a fresh proxier given the same state programs.
func TestStatesConverge(t *testing.T) {
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	var states []proxytest.Objects
	var names []string
	for _, sc := range proxytest.Scenarios(topo) {
		for _, st := range sc.Steps {
			states = append(states, st.Objects)
			names = append(names, sc.Name+"/"+st.Name)
		}
	}
	newProxier := func() (*userspace.Proxier, *xtablestest.Fake, *proxytest.Feeder) {
		fake := xtablestest.NewFake(topo.Family)
		p, err := userspace.NewProxier(userspace.Config{Common: engine.Common{NodeName: topo.NodeName}, HostIP: topo.NodeIP,
			ClusterCIDRs: []netip.Prefix{topo.ClusterCIDR}}, userspace.Interfaces{IPTables: fake})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f := proxytest.NewFeeder(p)
		f.Synced()
		return p, fake, f
	}
	walker, walkerFake, walkerFeed := newProxier()
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 120 {
		i := rng.IntN(len(states))
		if err := walkerFeed.Apply(states[i]); err != nil {
			t.Fatal(err)
		}
		if err := walker.Sync(context.Background()); err != nil {
			t.Fatalf("step %d (%s): %v", step, names[i], err)
		}
		fresh, freshFake, freshFeed := newProxier()
		if err := freshFeed.Apply(states[i]); err != nil {
			t.Fatal(err)
		}
		if err := fresh.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, want := canonical(t, walker, walkerFake), canonical(t, fresh, freshFake)
		fresh.Close()
		if got != want {
			t.Fatalf("step %d (%s): walked proxier differs from a fresh one\n--- walked:\n%s\n--- fresh:\n%s", step, names[i], got, want)
		}
	}
}
