package iptablestest

import (
	"errors"
	"fmt"
)

// Errors the Fake returns, wrapped with detail; test them with errors.Is.
// They mirror the failures of the real iptables tools (which report them
// only as text and an exit status).
var (
	// ErrUnknownTable: the table is not one of raw, mangle, nat, filter, security.
	ErrUnknownTable = errors.New("unknown table")
	// ErrNoSuchChain: the chain (or a jump/goto target) does not exist.
	ErrNoSuchChain = errors.New("no chain/target/match by that name")
	// ErrChainExists: -N of a chain that exists.
	ErrChainExists = errors.New("chain already exists")
	// ErrChainInUse: -X of a chain some rule still jumps to.
	ErrChainInUse = errors.New("chain is still referenced")
	// ErrChainNotEmpty: -X of a chain that still has rules.
	ErrChainNotEmpty = errors.New("chain is not empty")
	// ErrBuiltinChain: an operation only valid on user chains (or only on
	// built-in chains, like setting a policy) applied to the wrong kind.
	ErrBuiltinChain = errors.New("invalid operation on built-in/user chain")
	// ErrNoSuchRule: -D of a rule that does not exist (in a restore), or a
	// rule number out of range.
	ErrNoSuchRule = errors.New("bad rule (does a matching rule exist in that chain?)")
	// ErrBadRule: the rule or line does not parse, or the kernel would
	// refuse it (unknown option, target in the wrong table, ...).
	ErrBadRule = errors.New("bad rule")
	// ErrLoop: the jumps between chains form a loop.
	ErrLoop = errors.New("chains form a loop")
)

// RestoreError is returned by Restore (and NewFakeFromDump) when a line
// fails. Line is 1-based; Text is the line as given. As with the real
// iptables-restore, tables committed before the failing line stay
// committed; the table being parsed is left unchanged.
type RestoreError struct {
	Line int
	Text string
	Err  error
}

func (e *RestoreError) Error() string {
	return fmt.Sprintf("iptables-restore: line %d failed: %v (line: %q)", e.Line, e.Err, e.Text)
}

func (e *RestoreError) Unwrap() error { return e.Err }
