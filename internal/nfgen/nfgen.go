package nfgen

import "errors"

// ErrUnsupported is returned off Linux.
var ErrUnsupported = errors.New("nfgen: not supported on this OS")

// Digest fingerprints one iptables-legacy table: it changes whenever the
// table's chains or rules change, not when their counters do.
type Digest struct {
	// Hash covers every entry (counters excluded) and the hook offsets.
	Hash uint64
	// Entries is the number of entries in the table's blob: per user chain
	// its rules plus two (head and return), per built-in chain its rules
	// plus one (the policy), plus one at the end.
	Entries uint32
	// Size is the blob's size in bytes.
	Size uint32
}

// Custody records the generation of the nftables ruleset at which an
// engine last knew its table to hold what it believes, and keeps that
// knowledge across the engine's own transactions. The zero value knows
// nothing. It is not safe for concurrent use (the engines' hooks never run
// concurrently).
type Custody struct {
	gen   uint32
	known bool
}

// Verified records that at generation gen the table holds what the engine
// believes (just listed and compared, with no commit during the listing,
// or just written by a transaction it holds custody through).
func (c *Custody) Verified(gen uint32) { c.gen, c.known = gen, true }

// Lose forgets the recorded generation: the next full resync lists.
func (c *Custody) Lose() { c.known = false }

// Committed records one transaction of ours, bracketed by generation reads
// before and after it: custody holds if the generation before it was the
// recorded one and exactly one transaction (ours) committed. Anything else
// loses custody. It reports whether custody holds.
func (c *Custody) Committed(before, after uint32) bool { return c.CommittedN(before, after, 1) }

// CommittedN is Committed for n transactions of ours (n >= 0) between the
// two reads.
func (c *Custody) CommittedN(before, after uint32, n int) bool {
	want := before
	for range n {
		want = Next(want)
	}
	if !c.known || before != c.gen || after != want {
		c.known = false
		return false
	}
	c.gen = after
	return true
}

// Unchanged reports whether the generation is still the recorded one:
// nothing committed since the engine last held custody.
func (c *Custody) Unchanged(gen uint32) bool { return c.known && gen == c.gen }

// Known returns the recorded generation and whether there is one.
func (c *Custody) Known() (uint32, bool) { return c.gen, c.known }

// Next is the generation after gen: the kernel skips 0 when it wraps.
func Next(gen uint32) uint32 {
	if gen == ^uint32(0) {
		return 1
	}
	return gen + 1
}
