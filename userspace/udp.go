package userspace

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// udpProxy serves one UDP proxy socket. Each client address gets a flow:
// a connected socket to the endpoint chosen for it, kept while datagrams
// pass in either direction within the idle timeout.
type udpProxy struct {
	p    *Proxier
	key  BalancerKey
	conn *net.UDPConn
	addr netip.AddrPort
	done chan struct{}

	mu    sync.Mutex
	flows map[netip.AddrPort]*udpFlow
}

type udpFlow struct {
	u        *udpProxy
	client   netip.AddrPort
	backend  netip.AddrPort
	conn     *net.UDPConn
	lastSeen atomic.Int64 // unix nanoseconds of the last datagram either way
	once     sync.Once
	ac       *activeConn
}

var errFlowLimit = errors.New("userspace: UDP flow limit reached")

// udpBufferSize holds the largest UDP payload.
const udpBufferSize = 64 * 1024

func (p *Proxier) startUDP(key BalancerKey, bind netip.AddrPort) (*udpProxy, error) {
	conn, err := p.ifs.Sockets.ListenUDP(bind)
	if err != nil {
		return nil, err
	}
	u := &udpProxy{p: p, key: key, conn: conn, addr: addrPortOf(conn.LocalAddr()),
		done: make(chan struct{}), flows: map[netip.AddrPort]*udpFlow{}}
	if !p.goTracked(u.serve) {
		conn.Close()
		return nil, ErrClosed
	}
	return u, nil
}

func (u *udpProxy) Addr() netip.AddrPort { return u.addr }
func (u *udpProxy) Key() BalancerKey     { return u.key }

// Close stops the socket and ends every flow.
func (u *udpProxy) Close() {
	u.conn.Close()
	<-u.done
	u.mu.Lock()
	flows := make([]*udpFlow, 0, len(u.flows))
	for _, f := range u.flows {
		flows = append(flows, f)
	}
	u.mu.Unlock()
	for _, f := range flows {
		f.close()
	}
}

// Flows returns the client addresses with a live flow and their endpoints.
func (u *udpProxy) Flows() map[netip.AddrPort]netip.AddrPort {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[netip.AddrPort]netip.AddrPort, len(u.flows))
	for c, f := range u.flows {
		out[c] = f.backend
	}
	return out
}

func (u *udpProxy) serve() {
	defer close(u.done)
	buf := make([]byte, udpBufferSize)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP errors reported on the listening socket and the like.
			u.p.count(counterUDPReadErrors)
			continue
		}
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		f, err := u.flowFor(client)
		if err != nil {
			switch {
			case errors.Is(err, ErrNoEndpoints) || errors.Is(err, ErrUnknownService):
				u.p.count(counterNoEndpoints)
			case errors.Is(err, errFlowLimit):
			default:
				u.p.count(counterDialFailures)
			}
			u.p.count(counterUDPDropped)
			u.p.log.V(3).Info("Dropping UDP datagram", "service", u.key, "client", client, "err", err)
			continue
		}
		f.touch()
		if _, err := f.conn.Write(buf[:n]); err != nil {
			// The endpoint went away (ICMP port unreachable surfaces here
			// as ECONNREFUSED): end the flow; the next datagram from this
			// client picks an endpoint anew.
			u.p.count(counterUDPDropped)
			f.close()
			continue
		}
		u.p.count(counterUDPToBackend)
	}
}

func (u *udpProxy) flowFor(client netip.AddrPort) (*udpFlow, error) {
	u.mu.Lock()
	f, n := u.flows[client], len(u.flows)
	u.mu.Unlock()
	if f != nil {
		return f, nil
	}
	if max := u.p.cfg.MaxUDPFlows; max > 0 && n >= max {
		u.p.count(counterUDPFlowLimit)
		return nil, errFlowLimit
	}
	var lastErr error
	for attempt := 0; attempt <= u.p.cfg.MaxRetries; attempt++ {
		ep, err := u.p.lb.Next(u.key, client.Addr(), attempt > 0)
		if err != nil {
			return nil, err
		}
		conn, err := u.p.ifs.Sockets.DialUDP(ep)
		if err != nil {
			lastErr = err
			continue
		}
		f = &udpFlow{u: u, client: client, backend: ep, conn: conn}
		f.touch()
		f.ac = &activeConn{key: u.key, backend: ep, close: f.close}
		if !u.p.conns.register(f.ac) {
			conn.Close()
			return nil, ErrClosed
		}
		u.mu.Lock()
		u.flows[client] = f
		u.mu.Unlock()
		if !u.p.goTracked(f.replies) {
			f.close()
			return nil, ErrClosed
		}
		u.p.count(counterUDPFlows)
		return f, nil
	}
	return nil, lastErr
}

func (f *udpFlow) touch() { f.lastSeen.Store(time.Now().UnixNano()) }

func (f *udpFlow) close() {
	f.once.Do(func() {
		f.conn.Close()
		f.u.mu.Lock()
		if f.u.flows[f.client] == f {
			delete(f.u.flows, f.client)
		}
		f.u.mu.Unlock()
		if f.ac != nil {
			f.u.p.conns.unregister(f.ac)
		}
	})
}

// replies copies the endpoint's datagrams back to the client until the flow
// is idle for the idle timeout or closed.
func (f *udpFlow) replies() {
	defer f.close()
	timeout := f.u.p.cfg.UDPIdleTimeout
	buf := make([]byte, udpBufferSize)
	for {
		deadline := time.Unix(0, f.lastSeen.Load()).Add(timeout)
		if !time.Now().Before(deadline) {
			f.u.p.count(counterUDPFlowsExpired)
			return
		}
		f.conn.SetReadDeadline(deadline)
		n, err := f.conn.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // re-check: the client may have sent meanwhile
			}
			return
		}
		f.touch()
		if _, err := f.u.conn.WriteToUDPAddrPort(buf[:n], f.client); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			f.u.p.count(counterUDPDropped)
			continue
		}
		f.u.p.count(counterUDPToClient)
	}
}
