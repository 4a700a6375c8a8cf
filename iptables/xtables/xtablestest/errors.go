package xtablestest

import (
	"errors"

	"github.com/svcproxy/svcproxy/iptables/xtables"
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

// restoreError builds the error Restore returns for a failing line: an
// *xtables.RestoreError, as the real Runner returns (so errors.Is(err,
// xtables.ErrRestore) and errors.As work the same on both), whose Err
// wraps one of the errors above.
func restoreError(line int, text string, err error) error {
	return &xtables.RestoreError{Line: line, LineText: text, Output: err.Error(), Err: err}
}
