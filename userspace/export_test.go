package userspace

import (
	"context"
	"time"
)

// Drifted runs p's drift check (Hooks.Drifted) for tests; the base runs it
// only from Run.
func Drifted(ctx context.Context, p *Proxier) (bool, error) { return p.drifted(ctx) }

// ProcessCPU is processCPU for the benchmarks of package userspace_test.
func ProcessCPU() time.Duration { return processCPU() }
