//go:build linux

package changetracker

import (
	"syscall"
	"time"
)

// cpuTime is this process's user+system CPU time (every thread, the
// garbage collector's included): on a shared machine wall time includes
// waiting for a core, CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
