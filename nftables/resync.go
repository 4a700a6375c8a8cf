//go:build linux

package nftables

import (
	"context"
	"time"

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
// plan against the in-memory state (the plan is still computed in full,
// so a fault in the engine's own record is still written out). Any doubt
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
