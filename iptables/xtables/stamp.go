package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// Capabilities is what an engine needs to know about a Runner beyond
// its commands. Runner.Capabilities returns it; a wrapper that embeds the
// Runner forwards it, and one that does not has to say what it is (the
// method is required, so leaving it out does not compile). The zero value
// is a Runner that writes no kernel: an engine then splits no restore,
// lists one table per iptables-save and proves nothing from the kernel's
// table info.
type Capabilities struct {
	// Backend is BackendNFT or BackendLegacy: whose tables the Runner
	// writes; "" for a Runner that writes no kernel (a fake, a recorder).
	// The iptables engine splits large full syncs into several restores
	// by it (iptables-restore's cost grows faster than linearly with the
	// chains one restore creates) and reads the kernel's generation (nft)
	// or table info (legacy) by it.
	Backend string
	// InProcess: Restore writes legacy tables from the process
	// (internal/xtblob) instead of exec'ing iptables-legacy-restore. Each
	// call then reads and replaces whole tables, so an engine does not
	// split a payload into several restores. See RunnerConfig.LegacyTool.
	InProcess bool
	// SaveAll: SaveAllInto lists every table in one iptables-save. With
	// the nft backend each iptables-save fetches the rules of every table
	// whichever it prints, so one listing of everything costs what the nat
	// one alone does (BenchmarkKernelResync in BENCHMARKS.md). Without it
	// SaveAllInto returns an error matching errors.ErrUnsupported.
	SaveAll bool
}

// TableDigest fingerprints one table as the kernel holds it (its chains
// and rules, not its counters): Hash changes when the table does, Entries
// is its entry count (per user chain its rules plus two, per built-in
// chain its rules plus one, plus one). The real Runner's legacy digest is
// the kernel's table info (size, entry count and hook offsets, read in
// microseconds), which misses a foreign change that keeps all three.
type TableDigest struct {
	Hash    uint64
	Entries uint32
}

// Section returns the part of an iptables-save listing of several tables
// that lists table ("*table" to its "COMMIT"), or nil.
func Section(listing []byte, table Table) []byte {
	head := []byte("*" + string(table) + "\n")
	i := bytes.Index(listing, head)
	if i < 0 || (i > 0 && listing[i-1] != '\n') {
		return nil
	}
	rest := listing[i:]
	if j := bytes.Index(rest, []byte("\nCOMMIT\n")); j >= 0 {
		return rest[:j+len("\nCOMMIT\n")]
	}
	return rest
}

// InProcessRestorer is the real Runner's report on its in-process writer
// (see RunnerConfig.LegacyTool), for tests and diagnostics; engines read
// Capabilities.InProcess instead.
type InProcessRestorer interface {
	RestoresInProcess() bool
	// HandedToTool counts the Restore calls since New that the in-process
	// path handed to the tool: unsupported, for an input with a line it
	// does not encode; refused, for one whose in-process write failed
	// (the tool then had the last word).
	HandedToTool() (unsupported, refused uint64)
	// InProcessStats says whether the path is on, why it was switched
	// off, and what it handed to the tool.
	InProcessStats() InProcessStats
}

// InProcessStats describes the in-process path of a legacy Runner.
type InProcessStats struct {
	// Active: Restore writes from the process (what it can encode).
	Active bool
	// SwitchedOff is why the path was switched off during the Runner's
	// life (OffToolDisagreed, OffSelfCheck), "" if it was not (it may
	// still be inactive from the start: RunnerConfig.LegacyTool, the
	// versions, the environment).
	SwitchedOff string
	// Unsupported and Refused count the inputs handed to the tool (see
	// HandedToTool); Partial counts the refusals after an earlier table
	// was written (ErrPartialRestore), which nothing replays.
	Unsupported, Refused, Partial uint64
	// SelfChecks counts the read-backs, SelfCheckFailures those that
	// found a difference.
	SelfChecks, SelfCheckFailures uint64
	// SelfCheckTime is the wall time the read-backs took, in all.
	SelfCheckTime time.Duration
}

// NoKernel gives a Runner that writes no kernel (a recorder, a dry run, a
// benchmark's counter) the part of the Runner interface that describes
// the kernel, answered as nothing: the zero Capabilities, no listing of
// every table, and no stamp, generation or digest. Embed it to say so; a
// wrapper around another Runner embeds that Runner instead.
type NoKernel struct{}

// Capabilities is the zero value: no backend.
func (NoKernel) Capabilities() Capabilities { return Capabilities{} }

// SaveAllInto returns an error matching errors.ErrUnsupported.
func (NoKernel) SaveAllInto(context.Context, *bytes.Buffer) error {
	return fmt.Errorf("xtables: SaveAllInto: %w", errors.ErrUnsupported)
}

// TableStamp answers ok=false.
func (NoKernel) TableStamp(Table) (uint64, bool, error) { return 0, false, nil }

// TableGeneration answers ok=false.
func (NoKernel) TableGeneration() (uint32, bool, error) { return 0, false, nil }

// TableDigest answers ok=false.
func (NoKernel) TableDigest(Table) (TableDigest, bool, error) { return TableDigest{}, false, nil }

// TableChainNames answers ok=false.
func (NoKernel) TableChainNames(Table) ([]string, bool, error) { return nil, false, nil }

// CheckNextRestore does nothing: there is nothing to read back.
func (NoKernel) CheckNextRestore() {}
