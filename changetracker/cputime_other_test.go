//go:build !linux

package changetracker

import "time"

// cpuTime is not measured on this OS (cpu-ms then reads 0).
func cpuTime() time.Duration { return 0 }
