package userspace

import "context"

// Drifted runs p's drift check (Hooks.Drifted) for tests; the base runs it
// only from Run.
func Drifted(ctx context.Context, p *Proxier) (bool, error) { return p.drifted(ctx) }
