//go:build linux

package ipvs_test

import (
	"syscall"
	"time"
)

// processCPU is the user+system CPU time of this process so far: under a
// loaded machine it measures the work, where wall clock measures the queue.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
