package iptables_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// forwardingRunner is the plainest wrapper an embedder writes around a
// Runner to log, count or time it: it embeds the Runner and overrides
// nothing. Everything the engine knows of its driver is a method of
// xtables.Runner, so the wrapper forwards all of it by construction.
type forwardingRunner struct{ xtables.Runner }

// restoreCounter is the wrapper an embedder writes to count (or log, or
// time) the engine's writes: it embeds the Runner and overrides Restore
// only. Restore is the one way the engine writes a transaction, typed
// payloads included, so the wrapper sees every one.
type restoreCounter struct {
	xtables.Runner
	restores, typed int
}

func (c *restoreCounter) Restore(ctx context.Context, in xtables.RestoreInput) error {
	c.restores++
	if len(in.Ops) > 0 {
		c.typed++
	}
	return c.Runner.Restore(ctx, in)
}

// contractRun is what one Proxier over a Fake did: the tables it left,
// the Fake's calls and stats, the base's counters, and the chunk size it
// chose.
type contractRun struct {
	Dump      string
	Calls     map[string]int
	FakeStats iptablestest.Stats
	Syncs     [3]uint64 // syncs, full syncs, failures
	Chunk     int
	Drifted   []bool
	// TestRestores counts the Fake's restores made by the test itself
	// (the foreign change), not by the engine.
	TestRestores int
}

// runContract runs one Proxier over a Fake, through wrap(fake) when wrap
// is not nil.
func runContract(t *testing.T, caps xtables.Capabilities, watch string, wrap func(xtables.Runner) xtables.Runner) contractRun {
	t.Helper()
	ctx := context.Background()
	fake := iptablestest.NewFake(v1.IPv4Protocol)
	fake.SetCapabilities(caps)
	fake.SetTableWatch(watch)
	var ipt xtables.Runner = fake
	if wrap != nil {
		ipt = wrap(fake)
	}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}}, Interfaces{IPTables: ipt})
	if err != nil {
		t.Fatal(err)
	}
	var run contractRun
	drift := func() {
		d, err := Drifted(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		run.Drifted = append(run.Drifted, d)
	}
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		p.OnServiceAdd(svc("ns", name, fmt.Sprintf("10.96.0.%d", i+1), nodePort(int32(30000+i))))
		p.OnEndpointSliceAdd(slice("ns", name, "", ep{ip: fmt.Sprintf("10.1.%d.1", i)}, ep{ip: fmt.Sprintf("10.1.%d.2", i)}))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p) // cold start
	drift()
	// A partial sync: one service's endpoints change.
	p.OnEndpointSliceUpdate(slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.2"}), slice("ns", "s1", "", ep{ip: "10.1.1.3"}))
	mustSync(t, p)
	drift()
	// Steady full resyncs (the table watch may prove them unchanged).
	for range 2 {
		p.RequestFullSync()
		mustSync(t, p)
		drift()
	}
	// A foreign change: the canary flushed and deleted by hand.
	if err := fake.Restore(ctx, xtables.RestoreInput{Text: []byte("*nat\n-F KUBE-PROXY-CANARY\n-X KUBE-PROXY-CANARY\nCOMMIT\n")}); err != nil {
		t.Fatal(err)
	}
	run.TestRestores++
	drift()
	p.RequestFullSync()
	mustSync(t, p)
	drift()
	st := p.Stats()
	run.Dump, run.Calls, run.FakeStats = fake.Dump(), maps.Clone(fake.Calls()), fake.Stats()
	run.Syncs = [3]uint64{st.Syncs, st.FullSyncs, st.Failures}
	run.Chunk = ChunkChainsOf(p)
	return run
}

// TestForwardingRunnerSameEngine: an engine over a plain forwarding
// wrapper of its Runner makes the same syncs, the same writes and the
// same listings, and reports the same stats, as over the Runner itself,
// for every kind of Runner an engine tells apart (no kernel, iptables-nft,
// iptables-legacy through the tool and in process).
func TestForwardingRunnerSameEngine(t *testing.T) {
	for _, c := range []struct {
		name  string
		caps  xtables.Capabilities
		watch string
	}{
		{"no kernel", xtables.Capabilities{}, ""},
		{"nft", xtables.Capabilities{Backend: xtables.BackendNFT, SaveAll: true}, xtables.BackendNFT},
		{"legacy tool", xtables.Capabilities{Backend: xtables.BackendLegacy, SaveAll: true}, xtables.BackendLegacy},
		{"legacy in process", xtables.Capabilities{Backend: xtables.BackendLegacy, SaveAll: true, InProcess: true}, xtables.BackendLegacy},
	} {
		t.Run(c.name, func(t *testing.T) {
			direct := runContract(t, c.caps, c.watch, nil)
			wrapped := runContract(t, c.caps, c.watch, func(r xtables.Runner) xtables.Runner { return forwardingRunner{r} })
			if diff := cmp.Diff(direct, wrapped); diff != "" {
				t.Errorf("over a forwarding wrapper the engine differs (-direct +wrapped):\n%s", diff)
			}
			// A wrapper that overrides Restore alone sees every restore
			// the engine makes, its typed payloads included, and changes
			// nothing either.
			var counter *restoreCounter
			counted := runContract(t, c.caps, c.watch, func(r xtables.Runner) xtables.Runner {
				counter = &restoreCounter{Runner: r}
				return counter
			})
			if diff := cmp.Diff(direct, counted); diff != "" {
				t.Errorf("over a wrapper overriding Restore the engine differs (-direct +wrapped):\n%s", diff)
			}
			st := counted.FakeStats
			if engine := st.Restores - counted.TestRestores; counter.restores != engine || counter.typed != st.TypedRestores {
				t.Errorf("the wrapper's Restore saw %d restores (%d typed); the Runner got %d from the engine (%d typed)", counter.restores, counter.typed, engine, st.TypedRestores)
			}
			if st.TypedRestores == 0 {
				t.Errorf("no restore typed: the wrapper's count does not cover the engine's payloads")
			}
			if c.caps.Backend != "" && direct.Chunk == 0 && !c.caps.InProcess {
				t.Errorf("%s: no chunking chosen for a tool backend", c.name)
			}
			if c.caps.InProcess && direct.Chunk != 0 {
				t.Errorf("in process: chunk %d, want none", direct.Chunk)
			}
			if c.caps.Backend == xtables.BackendNFT && direct.Calls["SaveAllInto"] == 0 {
				t.Errorf("nft: full syncs listed table by table (calls %v)", direct.Calls)
			}
			if c.watch != "" && direct.Calls["TableGeneration"]+direct.Calls["TableDigest"] == 0 {
				t.Errorf("%s: the table watch was never read (calls %v)", c.name, direct.Calls)
			}
		})
	}
}
