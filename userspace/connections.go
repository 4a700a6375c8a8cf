package userspace

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
	"github.com/svcproxy/svcproxy/proxy"
)

// activeConn is one proxied TCP connection or UDP flow.
type activeConn struct {
	key     BalancerKey
	backend netip.AddrPort
	close   func()
}

// connTracker keeps the proxier's goroutines and established connections
// and UDP flows, for grace-period closing and for Close. The data path
// uses it outside syncs, so it has its own locks.
type connTracker struct {
	clk clock.WithTicker

	// Shutdown: closed is set once; closing is closed with it.
	goMu          sync.Mutex
	closed        atomic.Bool
	closing       chan struct{}
	closingCtx    context.Context
	cancelClosing context.CancelFunc
	wg            sync.WaitGroup

	mu     sync.Mutex
	active map[*activeConn]struct{}
	timers map[clock.Timer]struct{}

	pipes *tcprelay.PipePool // spliced TCP's pipes between bursts
}

func (c *connTracker) init(clk clock.WithTicker) {
	c.clk = clk
	c.closing = make(chan struct{})
	c.closingCtx, c.cancelClosing = context.WithCancel(context.Background())
	c.active = map[*activeConn]struct{}{}
	c.timers = map[clock.Timer]struct{}{}
	c.pipes = newPipePool()
}

// shutdown stops new goroutines and connections; idempotent.
func (c *connTracker) shutdown() {
	c.goMu.Lock()
	defer c.goMu.Unlock()
	if c.closed.Swap(true) {
		return
	}
	close(c.closing)
	c.cancelClosing()
}

// closeAll stops the grace timers, closes every connection and flow and
// waits for every tracked goroutine. Call after shutdown and after the
// listeners are closed.
func (c *connTracker) closeAll() {
	c.mu.Lock()
	for t := range c.timers {
		t.Stop()
	}
	clear(c.timers)
	conns := make([]*activeConn, 0, len(c.active))
	for ac := range c.active {
		conns = append(conns, ac)
	}
	c.mu.Unlock()
	for _, ac := range conns {
		ac.close()
	}
	c.wg.Wait()
	c.pipes.CloseIdle()
}

// goTracked runs fn in a goroutine that Close waits for; false after Close.
func (c *connTracker) goTracked(fn func()) bool {
	c.goMu.Lock()
	if c.closed.Load() {
		c.goMu.Unlock()
		return false
	}
	c.wg.Add(1)
	c.goMu.Unlock()
	go func() {
		defer c.wg.Done()
		fn()
	}()
	return true
}

func (c *connTracker) register(ac *activeConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.active[ac] = struct{}{}
	return true
}

func (c *connTracker) unregister(ac *activeConn) {
	c.mu.Lock()
	delete(c.active, ac)
	c.mu.Unlock()
}

// of returns the connections of key whose endpoint is not in current.
func (c *connTracker) staleOf(key BalancerKey, current []netip.AddrPort) []*activeConn {
	var stale []*activeConn
	c.mu.Lock()
	defer c.mu.Unlock()
	for ac := range c.active {
		if ac.key == key && !slices.Contains(current, ac.backend) {
			stale = append(stale, ac)
		}
	}
	return stale
}

// goTracked runs fn in a goroutine that Close waits for; false after Close.
func (p *Proxier) goTracked(fn func()) bool { return p.conns.goTracked(fn) }

// scheduleGraceClose closes, after the grace period, the connections of key
// whose endpoint is not in key's set by then.
func (p *Proxier) scheduleGraceClose(key BalancerKey) {
	grace := p.cfg.EndpointCloseGracePeriod
	if grace < 0 {
		return
	}
	c := &p.conns
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return
	}
	if dc, ok := c.clk.(clock.WithDelayedExecution); ok {
		var t clock.Timer
		t = dc.AfterFunc(grace, func() {
			c.mu.Lock()
			delete(c.timers, t)
			c.mu.Unlock()
			c.goTracked(func() { p.closeStale(key) })
		})
		c.timers[t] = struct{}{}
		return
	}
	// A clock without AfterFunc: wait in a goroutine that Close ends.
	t := c.clk.NewTimer(grace)
	c.goTracked(func() {
		defer t.Stop()
		select {
		case <-t.C():
			p.closeStale(key)
		case <-c.closing:
		}
	})
}

// closeStale closes key's connections to endpoints no longer in its set.
func (p *Proxier) closeStale(key BalancerKey) {
	for _, ac := range p.conns.staleOf(key, p.lb.Endpoints(key)) {
		p.log.V(2).Info("Closing connection to removed endpoint", "service", key, "endpoint", ac.backend)
		p.count(counterGraceClosed)
		ac.close()
	}
}

// udpFlows returns the live UDP flows (client → endpoint) of a service port's sockets.
func (p *Proxier) udpFlows(name proxy.ServicePortName) map[netip.AddrPort]netip.AddrPort {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	out := map[netip.AddrPort]netip.AddrPort{}
	if st := p.svc.services[name]; st != nil {
		for _, ls := range st.listeners {
			if u, ok := ls.sock.(*udpProxy); ok {
				for c, b := range u.Flows() {
					out[c] = b
				}
			}
		}
	}
	return out
}
