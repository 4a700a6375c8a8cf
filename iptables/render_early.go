package iptables

import (
	"github.com/svcproxy/svcproxy/changetracker"
)

// earlyRender is a full render started before the listing of the tables
// (renderEarly), on the first full sync of a Proxier.
type earlyRender struct {
	done <-chan []byte
}

// renderEarly starts the first full sync's render on another goroutine,
// as for a node that holds none of our service chains, so that it runs
// while ensureBase lists the tables and runs its commands (at 10,000
// services on legacy, a cold start's render and its ~45 iptables commands
// each take 0.2 s on a quiet machine, and a second or more each when the
// cores are busy). Only the renderer is touched meanwhile; ensureBase does
// not use it. Later full syncs render after the listing, as before.
func (p *Proxier) renderEarly(u *changetracker.Update) earlyRender {
	if p.wrote {
		return earlyRender{}
	}
	done := make(chan []byte, 1)
	go func() { done <- p.r.renderFull(u.Services, u.Endpoints, nil) }()
	return earlyRender{done: done}
}

// wait returns the early render once it is done, or nil when there was
// none or when existing (the nat chains listed) holds a service chain: the
// render then depends on them (chains declared in place, stale ones
// deleted) and is redone by the caller.
func (e earlyRender) wait(existing tableSums) []byte {
	if e.done == nil {
		return nil
	}
	payload := <-e.done
	if hasServiceChain(existing) {
		return nil
	}
	return payload
}
