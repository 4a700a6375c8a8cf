//go:build !linux

package iptables_test

import "time"

// cpuTime is not measured on this OS (cpu-ms/op then reads 0).
func cpuTime() time.Duration { return 0 }
