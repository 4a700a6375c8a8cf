package userspace

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// proxySocket is a TCP or UDP proxy socket.
type proxySocket interface {
	Addr() netip.AddrPort
	Key() BalancerKey
	Close()
}

type listenerState struct {
	id        listenerID
	sock      proxySocket
	allocated int // proxy port to release, 0 if none
}

// applyListeners opens and closes the proxy sockets of one service port.
// It returns how many it opened or closed.
func (p *Proxier) applyListeners(st *serviceState, plan *servicePlan) (int, error) {
	changed := 0
	for id, ls := range st.listeners {
		if !slices.Contains(plan.listeners, id) {
			p.closeListener(ls)
			delete(st.listeners, id)
			changed++
		}
	}
	var errs []error
	for _, id := range plan.listeners {
		if st.listeners[id] != nil {
			continue
		}
		ls, err := p.openListener(id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st.listeners[id] = ls
		changed++
	}
	return changed, errors.Join(errs...)
}

func (p *Proxier) openListener(id listenerID) (*listenerState, error) {
	start := func(bind netip.AddrPort) (proxySocket, error) {
		if id.protocol == v1.ProtocolUDP {
			u, err := p.startUDP(id.key, bind)
			if err != nil {
				return nil, err
			}
			return u, nil
		}
		t, err := p.startTCP(id.key, bind)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	ls := &listenerState{id: id}
	if id.kind == listenFixed {
		sock, err := start(id.bind)
		if err != nil {
			return nil, fmt.Errorf("listening on %s/%s: %w", id.bind, id.protocol, err)
		}
		ls.sock = sock
		return ls, nil
	}
	alloc := p.svc.tcpPorts
	if id.protocol == v1.ProtocolUDP {
		alloc = p.svc.udpPorts
	}
	var sock proxySocket
	addr, err := alloc.bind(func(port int) (netip.AddrPort, error) {
		s, err := start(netip.AddrPortFrom(p.cfg.ListenAddress, uint16(port)))
		if err != nil {
			return netip.AddrPort{}, err
		}
		sock = s
		return s.Addr(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s proxy socket on %s: %w", id.protocol, p.cfg.ListenAddress, err)
	}
	ls.sock = sock
	if p.cfg.PortRange.Size() > 0 {
		ls.allocated = int(addr.Port())
	}
	return ls, nil
}

func (p *Proxier) closeListener(ls *listenerState) {
	ls.sock.Close()
	if ls.allocated != 0 {
		if ls.id.protocol == v1.ProtocolUDP {
			p.svc.udpPorts.release(ls.allocated)
		} else {
			p.svc.tcpPorts.release(ls.allocated)
		}
	}
}

// teardownService closes a service port's sockets and forgets its
// balancer entries; its connections are closed after the grace period.
func (p *Proxier) teardownService(st *serviceState) {
	for id, ls := range st.listeners {
		p.closeListener(ls)
		delete(st.listeners, id)
	}
	for _, f := range st.plan.frontends {
		p.lb.Delete(f.key)
		p.scheduleGraceClose(f.key)
	}
}

// Listener describes one open proxy socket.
type Listener struct {
	Service proxy.ServicePortName
	// Local: this socket serves the service's local endpoint set (the
	// traffic a Local traffic policy applies to); otherwise the cluster set.
	Local    bool
	Protocol v1.Protocol
	// Addr is the bound address: ListenAddress and a proxy port, a node
	// port, or (CaptureBind) a service address.
	Addr netip.AddrPort
	// Endpoints are the endpoints connections through it are sent to, sorted.
	Endpoints []netip.AddrPort
	// Affinity is the set's session affinity.
	Affinity Affinity
}

// Listeners returns every open proxy socket of p, sorted by service,
// protocol, set (cluster first), then address. It is safe to call at any
// time; during a sync it waits for the sync to finish.
func Listeners(p *Proxier) []Listener {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	var out []Listener
	for name, st := range p.svc.services {
		for _, ls := range st.listeners {
			key := ls.sock.Key()
			aff, _ := p.lb.Affinity(key)
			out = append(out, Listener{Service: name, Local: key.Local, Protocol: ls.id.protocol,
				Addr: ls.sock.Addr(), Endpoints: p.lb.Endpoints(key), Affinity: aff})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].Service.String(), out[j].Service.String(); a != b {
			return a < b
		}
		if out[i].Protocol != out[j].Protocol {
			return out[i].Protocol < out[j].Protocol
		}
		if out[i].Local != out[j].Local {
			return !out[i].Local
		}
		return out[i].Addr.Compare(out[j].Addr) < 0
	})
	return out
}

// ProxyAddr returns the address of p's proxy socket (at a proxy port, not
// a node port or service address) serving name's cluster endpoint set, or
// with local its local set (see Listener.Local). In CaptureNone mode this
// is where clients connect. ok is false when there is no such socket.
func ProxyAddr(p *Proxier, name proxy.ServicePortName, local bool) (addr netip.AddrPort, ok bool) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	st := p.svc.services[name]
	if st == nil {
		return netip.AddrPort{}, false
	}
	for id, ls := range st.listeners {
		if id.kind == listenProxyPort && id.key.Local == local {
			return ls.sock.Addr(), true
		}
	}
	return netip.AddrPort{}, false
}
