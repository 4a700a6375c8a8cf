package xtables

import (
	"errors"
	"fmt"
	"time"
)

// ErrRestore matches (errors.Is) every *RestoreError.
var ErrRestore = errors.New("iptables-restore failed")

// ErrNoBinary is returned by New when an iptables binary is not found.
var ErrNoBinary = errors.New("iptables binary not found")

// ErrLockHeld matches (errors.Is) every *LockError: another program held
// the xtables lock for longer than RunnerConfig.LockWait. It is not
// retried here; an engine's sync fails with it and its loop retries with
// backoff.
var ErrLockHeld = errors.New("xtables lock held by another program")

// ErrPartialRestore matches (errors.Is) a Restore that the kernel refused
// after it had already written an earlier table of the same input (the
// in-process path on the legacy backend writes the tables one by one, as
// the tool commits each at its COMMIT). The input is applied in part and
// is not replayed: the engine's sync fails, and its next sync, a full
// one, compares the tables with what it wants.
var ErrPartialRestore = errors.New("iptables restore applied in part")

// partialError marks the in-process path's partial write.
type partialError struct{ err error }

func (e *partialError) Error() string        { return e.err.Error() }
func (e *partialError) Unwrap() error        { return e.err }
func (e *partialError) Is(target error) bool { return target == ErrPartialRestore }

// ErrSelfCheck matches (errors.Is) a Restore whose read-back (the
// self-check of the in-process path) did not find what the input meant:
// the in-process path is off from then on, and the engine's next sync, a
// full one, rewrites what differs through the tool.
var ErrSelfCheck = errors.New("iptables self-check: the tables do not hold what was written")

// LockError is a command that gave up waiting for the xtables lock.
type LockError struct {
	// Tool is the command that waited ("iptables-restore", "iptables").
	Tool string
	// Wait is how long it waited.
	Wait time.Duration
	// Output is what the tool printed (trimmed).
	Output string
	// Err is the underlying exec error.
	Err error
}

func (e *LockError) Error() string {
	return fmt.Sprintf("%s: xtables lock still held after %s: %s", e.Tool, e.Wait, e.Output)
}

func (e *LockError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLockHeld) true.
func (e *LockError) Is(target error) bool { return target == ErrLockHeld }

// RestoreError is a failed iptables-restore run.
type RestoreError struct {
	// Line is the 1-based input line iptables-restore reported, or 0.
	Line int
	// LineText is that input line, when Line is known.
	LineText string
	// Output is what iptables-restore printed (trimmed).
	Output string
	// Err is the underlying error: a *LockError when the xtables lock
	// was held too long, the exec error otherwise (or, from
	// xtablestest.Fake, the reason the line was refused).
	Err error
}

func (e *RestoreError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("iptables-restore failed at line %d (%q): %s", e.Line, e.LineText, e.Output)
	}
	return fmt.Sprintf("iptables-restore failed: %s (%v)", e.Output, e.Err)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRestore) true.
func (e *RestoreError) Is(target error) bool { return target == ErrRestore }
