package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tcpProxy accepts connections on one proxy socket and forwards each to an
// endpoint of its balancer key.
type tcpProxy struct {
	p    *Proxier
	key  BalancerKey
	ln   net.Listener
	addr netip.AddrPort
	done chan struct{} // closed when serve returned
}

func (p *Proxier) startTCP(key BalancerKey, bind netip.AddrPort) (*tcpProxy, error) {
	ln, err := p.ifs.Sockets.ListenTCP(bind)
	if err != nil {
		return nil, err
	}
	t := &tcpProxy{p: p, key: key, ln: ln, addr: addrPortOf(ln.Addr()), done: make(chan struct{})}
	if !p.goTracked(t.serve) {
		ln.Close()
		return nil, ErrClosed
	}
	return t, nil
}

func (t *tcpProxy) Addr() netip.AddrPort { return t.addr }
func (t *tcpProxy) Key() BalancerKey     { return t.key }

// Close stops accepting and waits for the accept loop; established
// connections are left to the grace-period logic.
func (t *tcpProxy) Close() {
	t.ln.Close()
	<-t.done
}

func (t *tcpProxy) serve() {
	defer close(t.done)
	delay := time.Duration(0)
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off (bounded) and
			// keep serving; the error is logged and counted.
			t.p.count(counterAcceptErrors)
			t.p.log.V(2).Info("Accept failed", "service", t.key, "err", err)
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			select {
			case <-time.After(delay):
			case <-t.p.conns.closing:
				return
			}
			continue
		}
		delay = 0
		if !t.p.goTracked(func() { t.handle(c) }) {
			c.Close()
			return
		}
	}
}

// handle proxies one accepted client connection.
func (t *tcpProxy) handle(client net.Conn) {
	p := t.p
	p.count(counterTCPAccepted)
	clientAddr := addrPortOf(client.RemoteAddr()).Addr()
	backend, conn, err := p.dialBackend(t.key, clientAddr)
	if err != nil {
		if errors.Is(err, ErrNoEndpoints) || errors.Is(err, ErrUnknownService) {
			p.count(counterNoEndpoints)
		} else {
			p.count(counterDialFailures)
		}
		p.log.V(2).Info("No backend for connection", "service", t.key, "client", client.RemoteAddr(), "err", err)
		// Answer with a reset, the closest a userspace proxy gets to the
		// REJECT the other modes install.
		if tc, ok := client.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		client.Close()
		return
	}
	pair := &tcpPair{client: client, backend: conn, halfCloseTimeout: p.cfg.TCPHalfCloseTimeout, pipes: &p.conns.pipes}
	ac := &activeConn{key: t.key, backend: backend, close: pair.closeBoth}
	if !p.conns.register(ac) {
		pair.closeBoth()
		return
	}
	defer p.conns.unregister(ac)
	p.count(counterTCPProxied)
	if pair.run() {
		p.count(counterHalfCloseReset)
		p.log.V(2).Info("Reset a half-closed connection whose other side stayed silent", "service", t.key, "client", client.RemoteAddr(), "endpoint", backend, "timeout", p.cfg.TCPHalfCloseTimeout)
	}
}

// dialBackend picks an endpoint and dials it; on failure it tries the next
// one, up to MaxRetries more times, backing off between attempts.
func (p *Proxier) dialBackend(key BalancerKey, client netip.Addr) (netip.AddrPort, net.Conn, error) {
	backoff := p.cfg.RetryBackoff
	var lastErr error
	for attempt := 0; attempt <= p.cfg.MaxRetries; attempt++ {
		if attempt > 0 && backoff > 0 {
			select {
			case <-time.After(backoff):
			case <-p.conns.closing:
				return netip.AddrPort{}, nil, ErrClosed
			}
			if backoff *= 2; backoff > maxRetryBackoff {
				backoff = maxRetryBackoff
			}
		}
		ep, err := p.lb.Next(key, client, attempt > 0)
		if err != nil {
			return netip.AddrPort{}, nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TCPDialTimeout)
		stop := context.AfterFunc(p.conns.closingCtx, cancel)
		conn, err := p.ifs.Sockets.DialTCP(ctx, ep)
		stop()
		cancel()
		if err == nil {
			return ep, conn, nil
		}
		p.count(counterDialErrors)
		p.log.V(3).Info("Dial to endpoint failed", "service", key, "endpoint", ep, "attempt", attempt+1, "err", err)
		lastErr = err
	}
	return netip.AddrPort{}, nil, lastErr
}

// tcpPair copies both directions of one proxied connection.
type tcpPair struct {
	client, backend net.Conn
	pipes           *pipePool
	once            sync.Once
	// halfCloseTimeout (<0: none): after one direction ended cleanly, the
	// other may be silent this long before both sides are reset.
	halfCloseTimeout time.Duration
	halfClosed       atomic.Bool // one direction ended cleanly
	timedOut         atomic.Bool // the other then stayed silent
}

func (c *tcpPair) closeBoth() {
	c.once.Do(func() {
		c.client.Close()
		c.backend.Close()
	})
}

// run copies both ways until both directions ended. A clean EOF in one
// direction is passed on as a half-close (CloseWrite) and the other
// direction keeps flowing as long as it carries data at least every
// halfCloseTimeout; an error in either direction, or that timeout, resets
// both sides. It reports whether the timeout ended the connection.
func (c *tcpPair) run() bool {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.copy(c.client, c.backend)
	}()
	// The client's request is likely waiting already: this goroutine
	// forwards it at once, before the new one runs.
	c.copy(c.backend, c.client)
	wg.Wait()
	c.closeBoth()
	return c.timedOut.Load()
}

type closeWriter interface{ CloseWrite() error }

type lingerer interface{ SetLinger(sec int) error }

// abort closes both sides with a reset: a stream that broke must not look
// like one that ended (a clean FIN could pass a truncated response off as
// complete).
func (c *tcpPair) abort() {
	for _, conn := range []net.Conn{c.client, c.backend} {
		if l, ok := conn.(lingerer); ok {
			l.SetLinger(0)
		}
	}
	c.closeBoth()
}

func (c *tcpPair) copy(dst, src net.Conn) {
	for {
		// Splices on Linux, holding a pipe only while data is in flight
		// (see copyStream).
		n, err := copyStream(c.pipes, dst, src)
		if err == nil {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && c.halfClosed.Load() {
			if n > 0 {
				// Data flowed in this window: give it another. (The
				// first window may count bytes from before the other
				// side finished: a silent peer gets at most two.)
				src.SetReadDeadline(time.Now().Add(c.halfCloseTimeout))
				continue
			}
			c.timedOut.Store(true)
		}
		c.abort()
		return
	}
	if cw, ok := dst.(closeWriter); ok {
		if cw.CloseWrite() == nil {
			// dst is the other direction's source: from now on it must
			// keep talking (see run).
			if c.halfCloseTimeout > 0 && !c.halfClosed.Swap(true) {
				dst.SetReadDeadline(time.Now().Add(c.halfCloseTimeout))
			}
			return
		}
	}
	c.closeBoth()
}
