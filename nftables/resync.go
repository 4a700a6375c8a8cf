//go:build linux

package nftables

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// A full resync of an unchanged table costs next to nothing: the engine
// keeps custody of the table through the generation id. It records the
// generation at which it last knew the table (a listing during which the
// generation did not move), and after each of its own transactions, read
// just before and just after it, keeps custody only if the generation
// moved by exactly one (no other transaction committed in between; a
// foreign commit racing ours shows as a move of two or more). A periodic,
// node-change, engine-chosen or requested full resync (the reasons the base
// lets trust the last write: engine.Request.Unchanged) that finds the
// generation still at the recorded value skips the listing and diffs the
// plan against the in-memory state. A periodic or requested one (not a
// node change: the node's labels select endpoints) plans again only the
// services the change tracker reports changed since the last sync (what a
// partial sync would plan): every other service's recorded plan is taken
// as it is, once checked against the state (its chains' hashes and rule
// counts, its sets and its elements: recordHolds), and planned again if
// the state does not hold it, so a fault in the engine's own record is
// still written out. Any doubt
// (a start, a failure, drift, a cleanup, the generation moved, no reader,
// a read error) lists the table as before. A requested full sync skips
// only when custody goes back to a listing that read every chain's hash
// (a start, a failure, a request), not to a periodic listing that trusted
// the recorded ones. Any commit in the network
// namespace moves the generation, so on a node where other nftables users
// (or this engine's other family) commit between two resyncs, the resync
// lists: the skip is an optimisation, never a risk.

// lastCommitHolds is the Unchanged hook: the generation is still the one
// custody recorded (see above). engine.Request.Unchanged asks it only for
// a full sync whose reason allows skipping the listing.
func (p *proxier) lastCommitHolds(req *engine.Request) bool {
	if p.ifs.Generation == nil || p.static == nil {
		return false
	}
	g, err := p.ifs.Generation.Generation()
	if err != nil {
		p.log.V(2).Info("Reading the nftables generation; listing the table", "error", err.Error())
		return false
	}
	if !p.custody.Unchanged(g) {
		return false
	}
	if req.Reason == engine.ReasonRequested && !p.custodyRead {
		// A requested full sync reads every chain's content hash unless
		// custody goes back to a listing that read them: a periodic
		// listing trusts the recorded hashes of chains that still exist.
		return false
	}
	p.log.V(2).Info("Full sync: the nftables generation is the one we last committed; not listing the table", "generation", g)
	return true
}

// listStateTracked is listState bracketed by generation reads: a listing
// during which nothing committed is the table at that generation, and the
// engine takes custody from there.
func (p *proxier) listStateTracked(ctx context.Context, known *tableState) (*tableState, error) {
	before, okBefore := p.generation()
	st, err := listState(ctx, p.nft, p.ifs.Comments, p.family(), known)
	after, okAfter := p.generation()
	if err == nil && okBefore && okAfter && before == after {
		p.custody.Verified(after)
		p.custodyRead = known == nil
	} else {
		p.custody.Lose()
	}
	return st, err
}

// runTracked is run bracketed by generation reads (run commits at most one
// transaction, and none for an empty change set).
func (p *proxier) runTracked(ctx context.Context, cs *changeSet, now time.Time) (int, error) {
	if cs.empty() || p.ifs.Generation == nil {
		return p.run(ctx, cs, now)
	}
	before, okBefore := p.generation()
	n, err := p.run(ctx, cs, now)
	after, okAfter := p.generation()
	if err != nil || !okBefore || !okAfter {
		p.custody.Lose()
	} else {
		p.custody.Committed(before, after)
	}
	return n, err
}

func (p *proxier) generation() (uint32, bool) {
	if p.ifs.Generation == nil {
		return 0, false
	}
	g, err := p.ifs.Generation.Generation()
	return g, err == nil
}

// recordedPlans returns the plans recorded before this full sync that it
// may take instead of planning again, or nil: only when the listing was
// skipped (unchanged: the table is the state) on a periodic or requested
// resync without a node change. (A node change may select other
// endpoints for every service; the other reasons doubt the state.)
func (p *proxier) recordedPlans(req *engine.Request, unchanged bool) map[types.NamespacedName]*servicePlan {
	if !unchanged || req.Update.NodeChanged {
		return nil
	}
	switch req.Reason {
	case engine.ReasonPeriodic, engine.ReasonRequested:
		return p.plans
	}
	return nil
}

// recordedPlan is service n's recorded plan when the full sync may take it
// as it is: the change tracker reports n unchanged since the last sync
// (its ports and endpoints are those it was planned from) and the state
// holds the plan. nil: plan it.
func recordedPlan(recorded map[types.NamespacedName]*servicePlan, u *changetracker.Update, st *tableState, n types.NamespacedName) *servicePlan {
	if recorded == nil || u.ChangedServices.Has(n) {
		return nil
	}
	sp := recorded[n]
	if sp == nil || !recordHolds(st, sp) {
		return nil
	}
	return sp
}

// recordHolds reports whether st holds everything sp writes: its chains
// with their content hashes (and rule counts, where a listing counted
// them), its sets with their timeouts and its elements with their values.
// An element another service holds with another value (a conflict the
// first service keeps) fails it too: such a service is planned again.
func recordHolds(st *tableState, sp *servicePlan) bool {
	for i := range sp.chains {
		c := &sp.chains[i]
		if h, ok := st.chains[c.name]; !ok || h != c.hash {
			return false
		}
		if n, counted := st.counts[c.name]; counted && n != c.ruleCount() {
			return false
		}
	}
	for _, s := range sp.sets() {
		if t, ok := st.sets[s.name]; !ok || t != s.timeout {
			return false
		}
	}
	for i := range sp.elems {
		e := &sp.elems[i]
		if v, ok := st.elems[e.container].get(e.key); !ok || v != e.value {
			return false
		}
	}
	// Its endpoint-map elements are not compared: recorded plans are taken
	// only when nothing was listed, and then the state's elements are the
	// plans' own (tableState.epsListed is false).
	return true
}
