//go:build linux

package winkernel_test

import (
	"syscall"
	"time"
)

// processCPU is the user and system CPU time this process used so far.
// Benchmarks report it per op because on a shared machine wall time also
// counts the time spent waiting for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
