package userspace

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/svcproxy/svcproxy/internal/tcprelay"
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
	pair := &tcprelay.Pair{Client: client, Backend: conn, HalfCloseTimeout: p.cfg.TCPHalfCloseTimeout, Pipes: p.conns.pipes}
	ac := &activeConn{key: t.key, backend: backend, close: pair.CloseBoth}
	if !p.conns.register(ac) {
		pair.CloseBoth()
		return
	}
	defer p.conns.unregister(ac)
	p.count(counterTCPProxied)
	if pair.Run() {
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
