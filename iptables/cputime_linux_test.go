//go:build linux

package iptables_test

import (
	"syscall"
	"time"
)

// cpuTime is this process's user+system CPU time: on a shared machine
// wall time per op includes waiting for a core, CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
