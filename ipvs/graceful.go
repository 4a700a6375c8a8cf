package ipvs

import (
	"net/netip"
	"time"
)

// Graceful termination, as kube-proxy does it: a TCP or SCTP real server
// that leaves its service is first set to weight 0 (no new connections) and
// deleted once it has no active or inactive connections left, or when
// GracefulTerminationPeriod has passed. UDP real servers are deleted at once
// (and their conntrack entries cleared), since UDP has no end of connection
// to wait for.

type gracefulKey struct {
	vs VirtualServerKey
	rs netip.AddrPort
}

type gracefulItem struct {
	vs       VirtualServer
	rs       RealServer
	deadline time.Time
}

type gracefulQueue struct {
	items map[gracefulKey]*gracefulItem
	byVS  map[VirtualServerKey]map[netip.AddrPort]struct{}
}

func newGracefulQueue() *gracefulQueue {
	return &gracefulQueue{
		items: make(map[gracefulKey]*gracefulItem),
		byVS:  make(map[VirtualServerKey]map[netip.AddrPort]struct{}),
	}
}

func (q *gracefulQueue) has(vs VirtualServerKey, rs netip.AddrPort) bool {
	_, ok := q.items[gracefulKey{vs, rs}]
	return ok
}

func (q *gracefulQueue) add(vs VirtualServer, rs RealServer, deadline time.Time) {
	k := gracefulKey{vs.Key(), rs.AddrPort()}
	if _, ok := q.items[k]; ok {
		return
	}
	q.items[k] = &gracefulItem{vs: vs, rs: rs, deadline: deadline}
	m := q.byVS[k.vs]
	if m == nil {
		m = make(map[netip.AddrPort]struct{})
		q.byVS[k.vs] = m
	}
	m[k.rs] = struct{}{}
}

func (q *gracefulQueue) remove(vs VirtualServerKey, rs netip.AddrPort) {
	k := gracefulKey{vs, rs}
	if _, ok := q.items[k]; !ok {
		return
	}
	delete(q.items, k)
	if m := q.byVS[vs]; m != nil {
		delete(m, rs)
		if len(m) == 0 {
			delete(q.byVS, vs)
		}
	}
}

func (q *gracefulQueue) removeVS(vs VirtualServerKey) {
	for rs := range q.byVS[vs] {
		delete(q.items, gracefulKey{vs, rs})
	}
	delete(q.byVS, vs)
}

// Len is the number of real servers waiting to be deleted.
func (q *gracefulQueue) Len() int { return len(q.items) }

// process deletes the real servers whose connections are gone or whose
// deadline passed. It returns the first error; failed items stay queued.
func (q *gracefulQueue) process(ipvs Interface, now time.Time) (deleted int, err error) {
	for vsKey, rss := range q.byVS {
		var vs VirtualServer
		for rs := range rss {
			vs = q.items[gracefulKey{vsKey, rs}].vs
			break
		}
		current, lerr := ipvs.GetRealServers(&vs)
		if lerr != nil {
			if isNotFound(lerr) {
				q.removeVS(vsKey)
				continue
			}
			if err == nil {
				err = lerr
			}
			continue
		}
		byAddr := make(map[netip.AddrPort]*RealServer, len(current))
		for _, rs := range current {
			byAddr[rs.AddrPort()] = rs
		}
		for ap := range rss {
			it := q.items[gracefulKey{vsKey, ap}]
			cur, ok := byAddr[ap]
			if !ok {
				q.remove(vsKey, ap)
				continue
			}
			if cur.Weight > 0 {
				// someone (a newer plan) took it back into service
				q.remove(vsKey, ap)
				continue
			}
			if cur.ActiveConn+cur.InactiveConn > 0 && now.Before(it.deadline) {
				continue
			}
			if derr := ipvs.DeleteRealServer(&vs, cur); derr != nil && !isNotFound(derr) {
				if err == nil {
					err = derr
				}
				continue
			}
			deleted++
			q.remove(vsKey, ap)
		}
	}
	return deleted, err
}
