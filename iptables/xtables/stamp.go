package xtables

import (
	"bytes"
	"context"
)

// TableStamper is implemented by Runners that can fingerprint a table
// without listing it. The legacy backend's tables live in the kernel as
// one blob per table, and any iptables command (iptables -L of one empty
// chain included) copies and parses the whole blob (BenchmarkKernelDriftCheck
// in BENCHMARKS.md). The kernel also reports each table's size and
// entry count on their own, in microseconds; a change of either means the
// table changed. Drift checks use it to skip the expensive check while a
// table is unchanged since it was last verified.
//
// The real Runner implements it; it answers ok=false for the nft backend
// (where checking a chain is cheap anyway), off Linux, and for a table
// the kernel has not loaded.
type TableStamper interface {
	// TableStamp returns a value that changes whenever table's chains or
	// rules change (not their counters), and ok=false when there is none.
	TableStamp(table Table) (stamp uint64, ok bool, err error)
}

// Backender is implemented by Runners that know which backend their tools
// drive: BackendNFT or BackendLegacy. The real Runner implements it.
type Backender interface {
	Backend() string
}

// AllSaver is implemented by Runners that can list every table in one
// iptables-save call. With the nft backend each iptables-save fetches the
// rules of every table whichever it prints (BenchmarkKernelResync, in
// BENCHMARKS.md), so one listing of everything costs what the nat one
// alone does. The real
// Runner implements it.
type AllSaver interface {
	// SaveAllInto appends the iptables-save output of every table to buf.
	SaveAllInto(ctx context.Context, buf *bytes.Buffer) error
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

// InProcessRestorer is implemented by Runners that may apply a Restore
// input from the process instead of exec'ing iptables-restore (the real
// Runner on the legacy backend, see RunnerConfig.LegacyTool). Splitting a
// large payload into several restores pays with the tool (each process
// looks up fewer chain names) but not in process, where every restore
// reads and replaces the whole table.
type InProcessRestorer interface {
	RestoresInProcess() bool
	// HandedToTool counts the Restore calls since New that the in-process
	// path handed to the tool: unsupported, for an input with a line it
	// does not encode; refused, for one whose in-process write failed
	// (the tool then had the last word).
	HandedToTool() (unsupported, refused uint64)
}
