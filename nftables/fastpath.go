//go:build linux

package nftables

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/mdlayher/netlink"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/internal/offheap"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// The netlink writer's switch, fallback and self-check.
//
// Switch: Interfaces.Netlink set (nftkernel.NewInterfaces sets it), Config.NFTOnly
// unset (the binary's --nftables-netlink), SVCPROXY_NFTABLES_NETLINK not
// "0", and, when the Interfaces say which nft they drive
// (Interfaces.NFTVersion: nftkernel.NewInterfaces), that nft and the running kernel
// within the versions the writer was verified with
// (internal/fastpath.NFTablesNetlink; SVCPROXY_NFTABLES_NETLINK=1 turns it
// on elsewhere too). NewProxier logs one line saying which writes and why.
//
// Fallback: a batch the kernel refuses (*BatchError: nothing of it was
// applied) is written again through nft, at once. When nft takes what
// the kernel refused over netlink, the two writers disagree; after
// netlinkRefusalsOff such disagreements the netlink writer is off for the
// life of the Proxier (logged at error level, counted). A batch nft
// refuses too is the sync's error, as before (the table is not what the
// engine believed: the next sync, a full one, lists it).
//
// Self-check: the first batch written over netlink, and the first of each
// full sync, is read back: a sample of the chains it wrote
// (selfCheckChains: the first of each kind, then spread over the batch),
// over netlink when Interfaces.Comments is set (its RuleComments: a get
// and a rule dump per chain with nftkernel's lister), otherwise, and for a
// chain the netlink read did not list, with knftables ListRules (one `nft
// --json list chain` per chain, which reads every set's elements of the
// table, seconds of a cold start at 40,000 services: BenchmarkKernelColdStart40k). Each must hold as
// many rules as planned, each with its planned comment (the first rule's
// carries the chain's content hash). A difference turns the netlink
// writer off (logged at error level, counted) and fails the sync with an
// error matching ErrSelfCheck; the next sync, a full one, lists the table
// and rewrites what differs through nft. The check sees rules missing,
// added, reordered or replaced by ones without our comments; it does not
// ask nft to parse the rules at run time, nor compare each rule's
// expressions, which
// the same-result kernel tests do (TestKernelNetlinkEquivalence: the
// listing of a table written over netlink is the listing of the same
// table written by nft).

// netlinkRefusalsOff is how many batches nft took after the kernel
// refused them over netlink before the netlink writer is switched off.
const netlinkRefusalsOff = 3

// ErrSelfCheck matches (errors.Is) a sync whose read-back of what the
// netlink writer wrote did not find the plan (see NetlinkStats).
var ErrSelfCheck = errors.New("nftables self-check: the table does not hold what was written over netlink")

// Reasons of NetlinkStats.SwitchedOff (and the switched-off metric).
const (
	// OffRefusals: nft took netlinkRefusalsOff batches the kernel refused
	// over netlink.
	OffRefusals = "refused-batches"
	// OffSelfCheck: the read-back did not find what was written.
	OffSelfCheck = "self-check"
)

// NetlinkStats describes the netlink writer of a Proxier.
type NetlinkStats struct {
	// Active: transactions the encoder knows go over netlink.
	Active bool
	// SwitchedOff is why the writer was switched off during the
	// Proxier's life (OffRefusals, OffSelfCheck), "" if it was not (it
	// may be inactive from the start: see the switch above).
	SwitchedOff string
	// Refused counts the batches the kernel refused over netlink, each
	// then written through nft; ToolTook those nft took.
	Refused, ToolTook uint64
	// SelfChecks counts the read-backs, SelfCheckFailures those that found
	// a difference.
	SelfChecks, SelfCheckFailures uint64
	// The arenas batches are encoded in, mapped outside the Go heap (so
	// they count once, not twice, against the process's memory; the
	// collector's goal is twice the live heap) unless BuffersOnHeap
	// (SVCPROXY_NFTABLES_HEAP_BUFFERS=1, or mmap failed): bytes mapped,
	// bytes resident now (in use plus the few kept between syncs; the
	// rest are given back to the kernel after each sync), and the most in
	// use at once.
	BufferBytesMapped, BufferBytesResident, BufferBytesPeak int64
	BuffersOnHeap                                           bool
}

// netlinkState is the writer's state: on and checkNext are touched only
// from the hooks; the counters are read by NetlinkStats at any time.
type netlinkState struct {
	on        atomic.Bool
	checkNext bool
	off       atomic.Pointer[string]

	refused, toolTook, selfChecks, selfCheckFailures atomic.Uint64

	// arenas hold the encoded batches (nlencode.go).
	arenas *offheap.Pool
	// spareMsgs is the message slice of a batch written during this full
	// sync, emptied, for a later chunk's encoding (the sync goroutine's
	// only; dropped when the sync ends).
	spareMsgs []netlink.Message
}

// envHeapBuffers=1 keeps the netlink encoder's arenas on the Go heap
// instead of memory mapped beside it (internal/offheap).
const envHeapBuffers = "SVCPROXY_NFTABLES_HEAP_BUFFERS"

// NetlinkStatsOf reports p's netlink writer state and counters. A
// function of the package, not a method: every engine's Proxier shows the
// same methods (the engine base's; see TestOneEngineSurface), and what is
// particular to one engine is asked of its package.
func NetlinkStatsOf(p *Proxier) NetlinkStats {
	n := &p.p.nl
	s := NetlinkStats{
		Active:            n.on.Load(),
		Refused:           n.refused.Load(),
		ToolTook:          n.toolTook.Load(),
		SelfChecks:        n.selfChecks.Load(),
		SelfCheckFailures: n.selfCheckFailures.Load(),
	}
	if n.arenas != nil {
		a := n.arenas.Stats()
		s.BufferBytesMapped, s.BufferBytesResident, s.BufferBytesPeak, s.BuffersOnHeap = a.Mapped, a.Resident, a.PeakInUse, a.Heap
	}
	if r := n.off.Load(); r != nil {
		s.SwitchedOff = *r
	}
	return s
}

// decideNetlink sets whether the netlink writer is on, logging why once.
func (p *proxier) decideNetlink() {
	if p.ifs.Netlink == nil {
		return
	}
	if p.cfg.NFTOnly {
		p.log.Info("nftables rules written through nft: the netlink writer is switched off (Config.NFTOnly, --nftables-netlink=false)")
		return
	}
	override, bad := fastpath.EnvOverride(fastpath.EnvNFTablesNetlink)
	if bad != "" {
		p.log.Info("Ignoring an unknown value of "+fastpath.EnvNFTablesNetlink+" (want 0 or 1)", "value", bad)
	}
	on, why := true, ""
	switch {
	case p.ifs.NFTVersion != "":
		tool, _ := fastpath.ParseVersion(p.ifs.NFTVersion)
		on, why = fastpath.Decide(fastpath.NFTablesNetlink, tool, fastpath.KernelVersion(), override, fastpath.EnvNFTablesNetlink)
	case override == fastpath.Off:
		on, why = false, fastpath.EnvNFTablesNetlink+"=0"
	default:
		why = "Interfaces.Netlink is set (the nft version is not known, so not checked)"
	}
	if on {
		p.log.Info("nftables transactions the encoder knows go over netlink: " + why)
	} else {
		p.log.Info("nftables rules written through nft: " + why)
	}
	p.nl.on.Store(on)
	p.nl.checkNext = on
	p.cfg.Metrics.SetFastWriterActive(p.cfg.IPFamily, metrics.WriterNFTablesNetlink, on)
}

// switchNetlinkOff turns the netlink writer off for good, once.
func (p *proxier) switchNetlinkOff(reason string, err error, msg string) {
	if !p.nl.on.CompareAndSwap(true, false) {
		return
	}
	p.nl.off.Store(&reason)
	p.log.Error(err, msg, "reason", reason)
	p.cfg.Metrics.IncFastWriterSwitchedOff(p.cfg.IPFamily, metrics.WriterNFTablesNetlink, reason)
}

// refusedOverNetlink handles a batch the kernel refused: cs goes through
// nft (run's fallback) and, when nft takes it, the disagreement counts.
func (p *proxier) refusedOverNetlink(ctx context.Context, cs *changeSet, msgs int, err error) (int, error) {
	p.nl.refused.Add(1)
	p.cfg.Metrics.IncFastWriterHandedToTool(p.cfg.IPFamily, metrics.WriterNFTablesNetlink, "refused")
	p.log.Info("The kernel refused a netlink batch; writing the same transaction through nft", "messages", msgs, "err", err.Error())
	n, terr := p.runNFT(ctx, cs)
	if terr != nil {
		return 0, fmt.Errorf("netlink transaction of %d messages: %w; then %w", msgs, err, terr)
	}
	if took := p.nl.toolTook.Add(1); took >= netlinkRefusalsOff {
		p.switchNetlinkOff(OffRefusals, err, fmt.Sprintf("nft took %d transactions the kernel refused over netlink; writing through nft from now on", took))
	}
	return n, nil
}

// selfCheckChains is how many of a batch's chains the self-check reads
// back, each with one nft listing of that chain: listing the whole table
// instead (nft --json list table) costs nft tens of seconds and a
// gigabyte at 10,000 services, and its JSON as much again in this process
// (BENCHMARKS.md's changelog, "nftables: the self-check's sample").
const selfCheckChains = 4

// selfCheckSample picks at most k of want: the first chain of each kind
// (service, external, firewall, endpoint: each kind has rules of its own
// forms) in the batch's order, then chains spread evenly over the rest.
func selfCheckSample(want []*chainSpec, k int) []*chainSpec {
	if len(want) <= k {
		return want
	}
	picked := make([]bool, len(want))
	var out []*chainSpec
	kinds := map[string]bool{}
	for i, c := range want {
		kind, _, _ := strings.Cut(c.name, "-")
		if !kinds[kind] && len(out) < k {
			kinds[kind] = true
			picked[i] = true
			out = append(out, c)
		}
	}
	for j := 0; len(out) < k; j++ {
		i := (j*len(want)/k + len(want) - 1) % len(want) // the last first, then spread
		for picked[i] {
			i = (i + 1) % len(want)
		}
		picked[i] = true
		out = append(out, want[i])
	}
	return out
}

// chainRulesLister lists the rules of several chains of the table for the
// self-check's read-back and the drift check. A chain missing from the
// result was not listed: missing from the table, or not read.
type chainRulesLister func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error)

// chainLister lists chains' rules through Interfaces.Comments (its
// RuleComments: a get and a rule dump per chain over netlink, where nft
// reads the elements of every set of the table to list one chain), or is
// nil when there is no lister: then each chain is one knftables ListRules.
func (p *proxier) chainLister() chainRulesLister {
	lister := p.ifs.Comments
	if lister == nil {
		return nil
	}
	return func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error) {
		comments, err := lister.RuleComments(ctx, chains)
		if err != nil {
			return nil, err
		}
		out := make(map[string][]*knftables.Rule, len(comments))
		for c, cs := range comments {
			rules := make([]*knftables.Rule, len(cs))
			for i, comment := range cs {
				rules[i] = &knftables.Rule{Chain: c, Comment: comment}
			}
			out[c] = rules
		}
		return out, nil
	}
}

// selfCheckNetlink reads back a sample of the chains cs wrote (see above).
func (p *proxier) selfCheckNetlink(ctx context.Context, cs *changeSet) error {
	var want []*chainSpec
	for _, w := range cs.writes {
		if w.spec.base == nil {
			want = append(want, w.spec)
		}
	}
	if len(want) == 0 {
		p.nl.checkNext = true // nothing to read back yet
		return nil
	}
	want = selfCheckSample(want, selfCheckChains)
	byChain := map[string][]*knftables.Rule{}
	if list := p.chainLister(); list != nil {
		names := make([]string, len(want))
		for i, c := range want {
			names[i] = c.name
		}
		listed, err := list(ctx, names)
		if err != nil {
			// One listing per chain below, as without the lister.
			p.log.V(2).Info("Could not list the sampled chains with one nft process", "err", err.Error())
		} else {
			byChain = listed
		}
	}
	missing := map[string]bool{}
	for _, c := range want {
		if _, listed := byChain[c.name]; listed {
			continue
		}
		// Not listed yet (no lister, or it did not list this chain):
		// alone, which tells a missing chain from a failed listing.
		rules, err := p.nft.ListRules(ctx, c.name)
		switch {
		case knftables.IsNotFound(err):
			missing[c.name] = true // a difference below
		case err != nil:
			p.log.Info("Could not read back what the netlink writer wrote; not checked", "err", err.Error())
			return nil
		default:
			byChain[c.name] = rules
		}
	}
	p.nl.selfChecks.Add(1)
	var diffs []string
	for _, c := range want {
		got := byChain[c.name]
		if missing[c.name] {
			diffs = append(diffs, c.name+": missing")
			continue
		}
		if len(got) != len(c.rules) {
			diffs = append(diffs, fmt.Sprintf("%s: %d rules, planned %d", c.name, len(got), len(c.rules)))
			continue
		}
		for i, r := range got {
			comment := ""
			if r.Comment != nil {
				comment = *r.Comment
			}
			if comment != ruleComment(c, i) {
				diffs = append(diffs, fmt.Sprintf("%s: rule %d has comment %q, planned %q", c.name, i+1, comment, ruleComment(c, i)))
				break
			}
		}
	}
	if len(diffs) == 0 {
		p.log.V(2).Info("The table reads back as the netlink writer wrote it", "chains", len(want))
		return nil
	}
	p.nl.selfCheckFailures.Add(1)
	shown := diffs
	if len(shown) > 5 {
		shown = shown[:5]
	}
	err := fmt.Errorf("%w: %d of %d chains read back differ: %q", ErrSelfCheck, len(diffs), len(want), shown)
	p.switchNetlinkOff(OffSelfCheck, err, "The table does not read back as the netlink writer wrote it; writing through nft from now on")
	return err
}
