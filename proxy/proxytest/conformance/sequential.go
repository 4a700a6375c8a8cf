package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// RunSequential runs scenarios (those that need no Options; for the whole
// table, proxytest.Scenarios(topo)) through one engine, the way a proxy in a cluster lives through
// it: scenario after scenario, each starting from the previous one's state
// cleared, and every change between two states delivered one object at a
// time, in a random order, with a Sync after a random subset of them (and
// after the last). The checks of each step are traced once its state is
// complete. The changes that clear one scenario and those of the next
// one's first step may share a Sync.
//
// RunScenarios builds a fresh engine per scenario, so it never sees one
// scenario's services, virtual servers or chains replaced by the next
// one's on the same node port or address, nor an EndpointSlice arriving
// before its Service or after its deletion. RunSequential does, once per
// seed (1 to seeds): a failure names the seed, the step, and the events
// since the previous step was checked (a clearing between scenarios included).
func RunSequential(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h Harness, seeds int) {
	t.Helper()
	quirked := prepare(t, topo, scenarios, h)
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			runSequential(t, topo, quirked, h, uint64(seed))
		})
	}
}

// objectKey names one Service or EndpointSlice.
type objectKey struct {
	slice    bool
	ns, name string
}

func (k objectKey) String() string {
	kind := "Service"
	if k.slice {
		kind = "EndpointSlice"
	}
	return kind + " " + k.ns + "/" + k.name
}

func runSequential(t *testing.T, topo proxytest.Topology, scenarios []proxytest.Scenario, h Harness, seed uint64) {
	p, tr := h.New(t, topo, proxytest.Options{})
	if p == nil || tr == nil {
		t.Fatalf("conformance: Harness.New returned a nil provider or tracer")
	}
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	f := proxytest.NewFeeder(p)
	ctx := t.Context()
	cur := map[objectKey]any{}
	node := proxytest.MakeNode(topo, topo.Zone)
	first := true
	var events []string

	// moveTo takes the engine from cur to want, one object at a time; the
	// last change is followed by a Sync when synced is set (a step about to
	// be checked), else only by chance like the others (so the clearing of
	// one scenario and the next one's first step may share a Sync, as they
	// do in a cluster).
	moveTo := func(want proxytest.Objects, synced bool) {
		if want.Node != nil {
			node = want.Node
		}
		next := map[objectKey]any{}
		for _, s := range want.Services {
			next[objectKey{false, s.Namespace, s.Name}] = s
		}
		for _, s := range want.EndpointSlices {
			next[objectKey{true, s.Namespace, s.Name}] = s
		}
		var changed []objectKey
		for k, v := range next {
			if cur[k] != v {
				changed = append(changed, k)
			}
		}
		for k := range cur {
			if _, ok := next[k]; !ok {
				changed = append(changed, k)
			}
		}
		// a fixed start (map order is random), then the seed's order
		slices.SortFunc(changed, func(a, b objectKey) int { return strings.Compare(a.String(), b.String()) })
		r.Shuffle(len(changed), func(i, j int) { changed[i], changed[j] = changed[j], changed[i] })
		if len(changed) == 0 {
			changed = append(changed, objectKey{}) // the node may have changed: one sync
		}
		for i, k := range changed {
			if v, ok := next[k]; ok {
				cur[k] = v
				events = append(events, "set "+k.String())
			} else if k != (objectKey{}) {
				delete(cur, k)
				events = append(events, "delete "+k.String())
			}
			state := proxytest.Objects{Node: node}
			for _, v := range cur {
				switch o := v.(type) {
				case *v1.Service:
					state.Services = append(state.Services, o)
				case *discovery.EndpointSlice:
					state.EndpointSlices = append(state.EndpointSlices, o)
				}
			}
			if err := f.Apply(state); err != nil {
				t.Fatal(err)
			}
			if first {
				f.Synced()
				first = false
			}
			if (synced && i == len(changed)-1) || r.IntN(2) == 0 {
				events = append(events, "sync")
				if err := syncWithTimeout(ctx, p); err != nil {
					t.Fatalf("seed %d: Sync: %v (events: %s)", seed, err, strings.Join(events, ", "))
				}
			}
		}
	}

	for _, sc := range scenarios {
		if sc.Options != (proxytest.Options{}) {
			continue
		}
		moveTo(proxytest.Objects{Node: proxytest.MakeNode(topo, topo.Zone)}, false)
		for _, st := range sc.Steps {
			moveTo(st.Objects, true)
			failed := false
			for _, c := range st.Checks {
				got, sampled, err := trace(tr, c.Packet, c.Want)
				if err == nil {
					if why := proxytest.Match(c.Want, got, sampled); why != "" {
						err = fmt.Errorf("got %s (%s)", got, why)
					}
				}
				if err != nil {
					t.Errorf("seed %d scenario %q step %q check %q:\n  packet: %s\n  want:   %s\n  %v\n  events since the last step's checks: %s",
						seed, sc.Name, st.Name, c.Name, c.Packet, c.Want, err, strings.Join(events, ", "))
					failed = true
				}
			}
			if failed {
				if d, ok := tr.(interface{ Dump() string }); ok {
					t.Logf("seed %d scenario %q step %q: dataplane:\n%s", seed, sc.Name, st.Name, d.Dump())
				}
			}
			events = events[:0] // the next report starts here (a clearing included)
		}
	}
}
