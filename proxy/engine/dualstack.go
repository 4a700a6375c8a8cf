package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/proxy"
)

// Proxier is the public surface every engine's Proxier shares (engine.Base's
// methods), so code that drives any mode, such as the reference binary,
// needs no per-engine wrapper. NewDualStack combines two.
type Proxier interface {
	proxy.Provider
	// DryRun returns what a full sync would write, as text, touching nothing.
	DryRun(ctx context.Context) (string, error)
	// Cleanup removes everything the mode may have left on the node.
	Cleanup(ctx context.Context) error
	// Close releases what the engine holds.
	Close() error
	// Stats reports the syncs so far.
	Stats() Stats
}

var _ Proxier = (*Base)(nil)

// NewDualStack combines an IPv4 and an IPv6 proxier of one mode into one
// Proxier: events go to both (proxy.NewDualStack, with its checks of nil,
// same-family and swapped proxiers), DryRun prints both plans under a
// "# IPv4" / "# IPv6" header, Cleanup and Close run on both (errors
// joined), and Stats adds up the counters and reports the later of the two
// last syncs (a failure of either wins, so it is not hidden).
func NewDualStack(ipv4, ipv6 Proxier) (Proxier, error) {
	p, err := proxy.NewDualStack(ipv4, ipv6)
	if err != nil {
		return nil, err
	}
	return &dualStack{Provider: p, pair: [2]Proxier{ipv4, ipv6}}, nil
}

type dualStack struct {
	proxy.Provider
	pair [2]Proxier
}

func (d *dualStack) DryRun(ctx context.Context) (string, error) {
	var out string
	for i, p := range d.pair {
		plan, err := p.DryRun(ctx)
		if err != nil {
			return "", err
		}
		out += fmt.Sprintf("# %s\n%s", [2]string{"IPv4", "IPv6"}[i], plan)
	}
	return out, nil
}

func (d *dualStack) Cleanup(ctx context.Context) error {
	return errors.Join(d.pair[0].Cleanup(ctx), d.pair[1].Cleanup(ctx))
}

func (d *dualStack) Close() error {
	return errors.Join(d.pair[0].Close(), d.pair[1].Close())
}

func (d *dualStack) Stats() Stats {
	a, b := d.pair[0].Stats(), d.pair[1].Stats()
	s := Stats{
		Syncs:               a.Syncs + b.Syncs,
		FullSyncs:           a.FullSyncs + b.FullSyncs,
		Failures:            a.Failures + b.Failures,
		ConsecutiveFailures: max(a.ConsecutiveFailures, b.ConsecutiveFailures),
		Skipped:             a.Skipped + b.Skipped,
		Last:                a.Last,
		LastSuccess:         a.LastSuccess,
	}
	if b.LastSuccess.Before(s.LastSuccess) || s.LastSuccess.IsZero() {
		s.LastSuccess = b.LastSuccess
	}
	switch {
	case a.Last.Err == nil && b.Last.Err != nil:
		s.Last = b.Last
	case (a.Last.Err == nil) == (b.Last.Err == nil) && b.Last.Start.After(a.Last.Start):
		s.Last = b.Last
	}
	return s
}
