//go:build linux

package iptables_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// TestKernelResyncRemovesWhatAStaleWriterPutBack: a writer that ignores
// the xtables lock read the nat table before a partial sync of ours
// replaced an endpoint (its KUBE-SEP chain deleted, another added), and
// wrote its stale copy back after it. On the legacy backend that copy has
// the entry count, size and hook offsets of ours (the kernel took it, and
// the table's stamp did not move); on iptables-nft it moves the ruleset
// generation. Either way the next full resync finds the chain of ours
// that nothing wants, removes it, and restores what the sync wrote.
func TestKernelResyncRemovesWhatAStaleWriterPutBack(t *testing.T) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		t.Run(backend, func(t *testing.T) {
			netnstest.InFreshNetns(t, func() { staleWriterTest(t, backend) })
		})
	}
}

func staleWriterTest(t *testing.T, backend string) {
	real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
	if err != nil {
		t.Skipf("backend %s: %v", backend, err)
	}
	lc := &listCounter{Runner: real}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: lc})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		p.OnServiceAdd(benchService(i))
		p.OnEndpointSliceAdd(benchSlice(i, 0))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	tool := "iptables-" + backend
	save := func() string {
		t.Helper()
		out, err := exec.Command(tool+"-save", "-t", "nat").Output()
		if err != nil {
			t.Fatal(err)
		}
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i >= 0 {
				l = l[:i]
			}
			keep = append(keep, l)
		}
		return strings.Join(keep, "\n")
	}
	chains := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, ":KUBE-SEP-") {
				m[strings.Fields(l)[0][1:]] = true
			}
		}
		return m
	}
	p.RequestFullSync()
	mustSync(t, p)

	// The other writer reads the table.
	stale, err := exec.Command(tool+"-save", "-t", "nat").Output()
	if err != nil {
		t.Fatal(err)
	}
	before := chains(save())
	// We replace an endpoint.
	p.OnEndpointSliceUpdate(benchSlice(3, 0), benchSlice(3, 1))
	mustSync(t, p)
	if p.Stats().Last.Full {
		t.Fatal("the endpoint change was a full sync")
	}
	want := save()
	var gone string
	for c := range before {
		if !chains(want)[c] {
			gone = c
		}
	}
	if gone == "" {
		t.Fatal("the endpoint change deleted no KUBE-SEP chain")
	}
	// It writes its copy back (a full replace of nat).
	cmd := exec.Command(tool + "-restore")
	cmd.Stdin = strings.NewReader(string(stale))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the stale write: %v\n%s", err, out)
	}
	if !chains(save())[gone] {
		t.Fatal("the stale write did not put the chain back")
	}
	// The next full resync.
	p.RequestFullSync()
	mustSync(t, p)
	got := save()
	if chains(got)[gone] {
		t.Errorf("the full resync left %s, which the stale writer put back", gone)
	}
	if got != want {
		t.Errorf("after the full resync the table is not what our sync wrote:\n%s", lineDiff(want, got))
	}
	if err := p.Cleanup(context.Background()); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
}
