package iptables

import "context"

// Drifted runs p's drift check (the Drifted hook) now, on the calling
// goroutine: real-kernel tests call it inside their namespace, where
// Run's own drift goroutine would not be.
func Drifted(ctx context.Context, p *Proxier) (bool, error) { return p.drifted(ctx) }

// SetChunkChains makes p's full syncs restore in chunks creating at most n
// new nat chains each, whatever its backend (0: one restore).
func SetChunkChains(p *Proxier, n int) { p.chunk = n }

// ChunkChainsOf is the most new nat chains one restore of p's full syncs
// creates (0: no limit), as NewProxier chose it from the Runner.
func ChunkChainsOf(p *Proxier) int { return p.chunk }

// Every sync of the package's tests checks its payload's ops against its
// text (ops.go); benchmarks turn it off (TestMain).
func init() { checkOps = true }

// SetCheckOps turns the check of every payload's ops on or off.
func SetCheckOps(on bool) { checkOps = on }

// OpsCap is how many ops p's render buffer holds.
func OpsCap(p *Proxier) int { return cap(p.r.out.ops) }
