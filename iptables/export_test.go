package iptables

import "context"

// Drifted runs p's drift check (the Drifted hook) now, on the calling
// goroutine: real-kernel tests call it inside their namespace, where
// Run's own drift goroutine would not be.
func Drifted(ctx context.Context, p *Proxier) (bool, error) { return p.drifted(ctx) }
