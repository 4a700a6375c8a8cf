package iptables

import (
	"github.com/svcproxy/svcproxy/changetracker"
)

// earlyRender is a full render started before the listing of the tables
// (renderEarly), on the first full sync of a Proxier.
type earlyRender struct {
	done <-chan restorePayload
}

// renderEarly starts the first full sync's render on another goroutine,
// as for a node that holds none of our service chains, so that it runs
// while ensureBase lists the tables and runs its commands (on legacy, a
// cold start's render and its setup take about as long as each other:
// BenchmarkKernelColdStart in BENCHMARKS.md). Only the renderer is touched
// meanwhile; ensureBase does
// not use it. Later full syncs render after the listing, as before.
func (p *Proxier) renderEarly(u *changetracker.Update) earlyRender {
	if p.wrote {
		return earlyRender{}
	}
	done := make(chan restorePayload, 1)
	go func() { done <- p.r.renderFull(u.Services, u.Endpoints, nil) }()
	return earlyRender{done: done}
}

// wait returns the early render once it is done, or false when there was
// none or when existing (the nat chains listed) holds a service chain: the
// render then depends on them (chains declared in place, stale ones
// deleted) and is redone by the caller.
func (e earlyRender) wait(existing tableSums) (restorePayload, bool) {
	if e.done == nil {
		return restorePayload{}, false
	}
	payload := <-e.done
	if hasServiceChain(existing) {
		return restorePayload{}, false
	}
	return payload, true
}
