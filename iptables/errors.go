package iptables

import (
	"errors"
	"fmt"
)

// ErrRestore matches (errors.Is) every *RestoreError.
var ErrRestore = errors.New("iptables-restore failed")

// ErrChainMissing is returned when a chain the engine expects is absent.
var ErrChainMissing = errors.New("iptables: chain missing")

// RestoreError is a failed iptables-restore run.
type RestoreError struct {
	// Line is the 1-based input line iptables-restore reported, or 0.
	Line int
	// LineText is that input line, when Line is known.
	LineText string
	// Output is what iptables-restore printed (trimmed).
	Output string
	// Err is the underlying exec error.
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

// SyncError is what Sync returns when applying the rules failed. The
// tracker's state is kept, and the next sync is a full one.
type SyncError struct {
	// Full reports whether the failed sync was a full one.
	Full bool
	// Step names what failed ("ensure chains", "restore", ...).
	Step string
	Err  error
}

func (e *SyncError) Error() string {
	kind := "partial"
	if e.Full {
		kind = "full"
	}
	return fmt.Sprintf("iptables %s sync: %s: %v", kind, e.Step, e.Err)
}

func (e *SyncError) Unwrap() error { return e.Err }
