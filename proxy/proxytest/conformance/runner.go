package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// SyncTimeout bounds each Sync the runner makes.
const SyncTimeout = 2 * time.Minute

// Harness is what an engine's test supplies to run the conformance table.
type Harness struct {
	// New builds a fresh engine for one scenario, configured for topo (see
	// proxytest.Topology) and opts, and the tracer that answers for what
	// it programs. It is called once per scenario, inside the scenario's
	// subtest; it may call t.Skip (for example when the engine has no
	// masquerade-all option) and should register its cleanup with
	// t.Cleanup. Required.
	New func(t *testing.T, topo proxytest.Topology, opts proxytest.Options) (proxy.Provider, proxytest.Tracer)
	// Quirks are this engine's known, explained differences from the
	// table, applied with proxytest.ApplyQuirks. A quirk without a Reason,
	// or one naming a scenario of the run but matching none of its checks,
	// fails the run before anything else, so stale quirks do not pile up.
	Quirks []proxytest.Quirk
}

// Run runs the whole conformance table for family against the engine h
// builds, one subtest per scenario.
func Run(t *testing.T, family v1.IPFamily, h Harness) {
	t.Helper()
	topo := proxytest.DefaultTopology(family)
	RunScenarios(t, topo, proxytest.Scenarios(topo), h)
}

// RunScenarios runs the given scenarios (for example a filtered or
// shuffled proxytest.Scenarios) against the engine h builds.
//
// For each scenario it builds an engine with h.New and a proxytest.Feeder
// over it; it feeds the first step, checks that Sync returns
// proxy.ErrNotSynced before the initial lists are reported synced, reports
// them synced, and then for every step feeds the objects (adds, updates
// and deletes against the previous step), calls Sync, and traces every
// check. A failed Sync ends the scenario; every mismatching check is
// reported with its scenario, step and check name, the packet, and want
// against got; the remaining steps still run. When the tracer has a Dump()
// string method, its output is logged after a step with a failure.
func RunScenarios(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h Harness) {
	t.Helper()
	quirked := prepare(t, topo, scenarios, h)
	for i, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			runScenario(t, topo, sc, quirked[i], h)
		})
	}
}

// prepare checks h and scenarios and returns scenarios with h.Quirks
// applied; it ends the test on a problem.
func prepare(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h Harness) []proxytest.Scenario {
	t.Helper()
	if h.New == nil {
		t.Fatal("conformance: Harness.New is nil")
	}
	if err := proxytest.Validate(topo, scenarios); err != nil {
		t.Fatalf("conformance: invalid scenarios: %v", err)
	}
	quirked, err := proxytest.ApplyQuirks(scenarios, h.Quirks)
	if err != nil {
		t.Fatalf("conformance: %v", err)
	}
	return quirked
}

// runScenario runs sc, checking the wanted results of quirked (sc with
// h.Quirks applied: the same steps, with skipped checks dropped).
func runScenario(t *testing.T, topo proxytest.Topology, sc, quirked proxytest.Scenario, h Harness) {
	p, tr := h.New(t, topo, sc.Options)
	if p == nil || tr == nil {
		t.Fatalf("conformance: Harness.New returned a nil provider or tracer")
	}
	f := proxytest.NewFeeder(p)
	ctx := t.Context()
	for i, st := range quirked.Steps {
		where := fmt.Sprintf("scenario %q step %q", sc.Name, st.Name)
		if err := f.Apply(st.Objects); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if i == 0 {
			if err := syncWithTimeout(ctx, p); !errors.Is(err, proxy.ErrNotSynced) {
				t.Errorf("%s: Sync before the initial lists were reported synced returned %v, want proxy.ErrNotSynced", where, err)
			}
			f.Synced()
		}
		if err := syncWithTimeout(ctx, p); err != nil {
			t.Fatalf("%s: Sync: %v", where, err)
		}
		for _, c := range sc.Steps[i].Checks {
			kept := slices.ContainsFunc(st.Checks, func(k proxytest.Check) bool { return k.Name == c.Name })
			if !kept {
				t.Logf("%s check %q: skipped: %s", where, c.Name, skipReason(h.Quirks, sc.Name, st.Name, c.Name))
			}
		}
		failed := false
		for _, c := range st.Checks {
			got, sampled, err := trace(tr, c.Packet, c.Want)
			if err != nil {
				t.Errorf("%s check %q:\n  packet: %s\n  want:   %s\n  error:  %v", where, c.Name, c.Packet, c.Want, err)
				failed = true
				continue
			}
			if why := proxytest.Match(c.Want, got, sampled); why != "" {
				t.Errorf("%s check %q:\n  packet: %s\n  want:   %s\n  got:    %s\n  why:    %s", where, c.Name, c.Packet, c.Want, got, why)
				failed = true
			}
		}
		if failed {
			if d, ok := tr.(interface{ Dump() string }); ok {
				t.Logf("%s: dataplane:\n%s", where, d.Dump())
			}
		}
	}
}

// skipReason is the Reason of the last quirk that skips the check (as
// proxytest.ApplyQuirks decides), for the log.
func skipReason(quirks []proxytest.Quirk, scenario, step, check string) string {
	reason := ""
	for _, q := range quirks {
		if q.Adjust == nil && q.Matches(scenario, step, check) {
			reason = q.Reason
		}
	}
	return reason
}

func syncWithTimeout(ctx context.Context, p proxy.Provider) error {
	ctx, cancel := context.WithTimeout(ctx, SyncTimeout)
	defer cancel()
	return p.Sync(ctx)
}

// trace asks tr about p, through TraceSample when tr is a Sampler.
func trace(tr proxytest.Tracer, p proxytest.Packet, want proxytest.Result) (got proxytest.Result, sampled bool, err error) {
	if s, ok := tr.(proxytest.Sampler); ok {
		got, err = s.TraceSample(p, want)
		return got, true, err
	}
	got, err = tr.Trace(p)
	return got, false, err
}
