//go:build linux

package iptables_test

import (
	"bytes"
	"context"
	"hash/maphash"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/nfgen"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// listCounter counts iptables-save listings; every other method, the
// real Runner's Capabilities and table watch included, is the embedded
// Runner's.
type listCounter struct {
	xtables.Runner
	lists int
}

func (l *listCounter) SaveInto(ctx context.Context, t xtables.Table, buf *bytes.Buffer) error {
	l.lists++
	return l.Runner.SaveInto(ctx, t, buf)
}

func (l *listCounter) SaveAllInto(ctx context.Context, buf *bytes.Buffer) error {
	l.lists++
	return l.Runner.SaveAllInto(ctx, buf)
}

// TestKernelResyncOfUnchangedTables: with both backends, a full resync of
// tables unchanged since our writes (the cold start, partial syncs) runs
// no iptables-save and restores nothing; a chain added by hand, a rule of
// ours deleted by hand or a chain of ours flushed by hand make the next
// resync list, and repair what is ours.
func TestKernelResyncOfUnchangedTables(t *testing.T) {
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		t.Run(backend, func(t *testing.T) {
			netnstest.InFreshNetns(t, func() { kernelResyncTest(t, backend) })
		})
	}
}

func kernelResyncTest(t *testing.T, backend string) {
	ctx := context.Background()
	real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
	if err != nil {
		t.Skipf("backend %s: %v", backend, err)
	}
	lc := &listCounter{Runner: real}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}, Netfilter: engine.Netfilter{LocalDetector: proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: mustPrefix("10.128.0.0/9")}}}, Interfaces{IPTables: lc})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		p.OnServiceAdd(benchService(i))
		p.OnEndpointSliceAdd(benchSlice(i, 0))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	if lc.lists == 0 {
		t.Fatal("the cold start did not list")
	}
	tool := "iptables-" + backend
	ipt := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", tool, args, err, out)
		}
	}
	save := func() string {
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
	resync := func(what string, wantList, wantWrites bool) {
		t.Helper()
		lc.lists = 0
		p.RequestFullSync()
		mustSync(t, p)
		st := p.Stats().Last
		if !st.Full {
			t.Fatalf("%s: not a full sync", what)
		}
		if got := lc.lists > 0; got != wantList {
			t.Errorf("%s: listed %d times, want listing=%v", what, lc.lists, wantList)
		}
		if got := st.Result.Writes > 0; got != wantWrites {
			t.Errorf("%s: wrote %d lines, want writes=%v", what, st.Result.Writes, wantWrites)
		}
	}
	resync("unchanged after the cold start", false, false)
	want := save()

	// Partial syncs of ours keep the proof.
	p.OnEndpointSliceUpdate(benchSlice(3, 0), benchSlice(3, 1))
	mustSync(t, p)
	p.OnEndpointSliceUpdate(benchSlice(3, 1), benchSlice(3, 0))
	mustSync(t, p)
	if p.Stats().Last.Full {
		t.Fatal("the endpoint change was a full sync")
	}
	resync("unchanged after partial syncs", false, false)

	// A foreign chain: listed, nothing of ours rewritten; then the proof
	// holds again.
	ipt("-t", "filter", "-N", "FOREIGN")
	resync("foreign chain added", true, false)
	resync("after the listing", false, false)

	// A rule of ours deleted by hand.
	var svcChain string
	for _, l := range strings.Split(want, "\n") {
		if strings.HasPrefix(l, "-A KUBE-SVC-") {
			svcChain = strings.Fields(l)[1]
			break
		}
	}
	ipt("-t", "nat", "-D", svcChain, "1")
	resync("rule of ours deleted", true, true)
	if got := save(); got != want {
		t.Errorf("rule not repaired:\n%s", lineDiff(want, got))
	}
	resync("after the repair", false, false)

	// A chain of ours flushed by hand.
	ipt("-t", "nat", "-F", svcChain)
	resync("chain of ours flushed", true, true)
	if got := save(); got != want {
		t.Errorf("flush not repaired:\n%s", lineDiff(want, got))
	}
	resync("after the second repair", false, false)
	if err := p.Cleanup(ctx); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
}

// BenchmarkKernelLegacyDigest is the legacy table watch's cost at 10,000
// services: per op, the stamp (GET_INFO) of each table a skipped resync
// checks (nat, filter, mangle). Reported once: blob-hash-s, a hash of the
// three tables' whole blobs, counters excluded (nfgen.LegacyDigest, which
// the engine does not use for that cost); nat-entries.
func BenchmarkKernelLegacyDigest(b *testing.B) {
	netnstest.InFreshNetns(b, func() {
		p, _ := kernelBenchProxier(b, xtables.BackendLegacy, 10000)
		if err := p.Sync(context.Background()); err != nil {
			b.Fatal(err)
		}
		tables := []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle}
		t0 := time.Now()
		seed := maphash.MakeSeed()
		var entries uint32
		for _, t := range tables {
			d, ok, err := nfgen.LegacyDigest(false, string(t), seed)
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if t == xtables.TableNAT {
				entries = d.Entries
			}
		}
		blob := time.Since(t0)
		b.ResetTimer()
		for b.Loop() {
			for _, t := range tables {
				// What the real legacy Runner's TableDigest reads.
				if _, ok, err := nfgen.LegacyInfo(false, string(t)); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		}
		b.ReportMetric(blob.Seconds(), "blob-hash-s")
		b.ReportMetric(float64(entries), "nat-entries")
	})
}
