package winkernel

import "context"

// Drifted runs p's drift check (Hooks.Drifted) once, for tests and
// benchmarks of the external test package.
func Drifted(ctx context.Context, p *Proxier) (bool, error) { return p.drifted(ctx) }
