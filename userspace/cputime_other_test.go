//go:build !linux

package userspace

import "time"

// processCPU is not measured off Linux.
func processCPU() time.Duration { return 0 }
