package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// WrappedHarness builds one engine for RunWrapped: over the kit's fakes
// when wrap is false, and over plain forwarding wrappers of the same
// fakes' interfaces when wrap is true (each a struct that embeds the
// interface and overrides nothing, as an embedder's logging or counting
// wrapper would). Observe reports what the engine did so far: the fakes'
// state, their call counts, the base's counters; it is compared as printed
// with %+v, one value a line.
type WrappedHarness struct {
	New func(t *testing.T, topo proxytest.Topology, opts proxytest.Options, wrap bool) (p proxy.Provider, observe func() any)
}

// RunWrapped runs every scenario of the conformance table for family
// through two engines, one over the fakes and one over forwarding
// wrappers of them, and fails when they differ after any step: an engine
// that found an optional capability of its driver by type assertion would
// lose it behind the wrapper and sync, write or count differently.
func RunWrapped(t *testing.T, family v1.IPFamily, h WrappedHarness) {
	t.Helper()
	topo := proxytest.DefaultTopology(family)
	for _, sc := range proxytest.Scenarios(topo) {
		t.Run(sc.Name, func(t *testing.T) {
			ctx := context.Background()
			direct, obsDirect := h.New(t, topo, sc.Options, false)
			wrapped, obsWrapped := h.New(t, topo, sc.Options, true)
			fd, fw := proxytest.NewFeeder(direct), proxytest.NewFeeder(wrapped)
			for i, step := range sc.Steps {
				errD, errW := fd.Apply(step.Objects), fw.Apply(step.Objects)
				if (errD == nil) != (errW == nil) {
					t.Fatalf("step %s: feeding: direct %v, wrapped %v", step.Name, errD, errW)
				}
				if i == 0 {
					fd.Synced()
					fw.Synced()
				}
				errD, errW = direct.Sync(ctx), wrapped.Sync(ctx)
				if (errD == nil) != (errW == nil) {
					t.Fatalf("step %s: Sync: direct %v, wrapped %v", step.Name, errD, errW)
				}
				if diff := cmp.Diff(observed(obsDirect()), observed(obsWrapped())); diff != "" {
					t.Fatalf("step %s: over forwarding wrappers the engine differs (-direct +wrapped):\n%s", step.Name, diff)
				}
			}
		})
	}
}

// ComparableStats is st without what differs between two runs of the same
// syncs (start times, durations; the error by its text), for an Observe.
func ComparableStats(st engine.Stats) any {
	last := st.Last
	last.Start, last.Duration = time.Time{}, 0
	errText := ""
	if last.Err != nil {
		errText = last.Err.Error()
	}
	last.Err = nil
	st.Last, st.LastSuccess = last, time.Time{}
	return struct {
		Stats engine.Stats
		Err   string
	}{st, errText}
}

// observed prints an Observe result for comparison: each element of a
// []any on a line of its own.
func observed(v any) string {
	vs, ok := v.([]any)
	if !ok {
		vs = []any{v}
	}
	var b strings.Builder
	for _, x := range vs {
		fmt.Fprintf(&b, "%+v\n", x)
	}
	return b.String()
}
