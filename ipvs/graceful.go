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

func (q *gracefulQueue) get(vs VirtualServerKey, rs netip.AddrPort) *gracefulItem {
	return q.items[gracefulKey{vs, rs}]
}

// appendReaps appends to ops (a sorted batch) one reap op for every real
// server that will be draining once ops are applied: those queued now and
// those ops drain, less those ops take back or delete. It reads the queue
// and changes nothing: queueing happens when apply runs the drain ops.
func (p *Proxier) appendReaps(ops opList) opList {
	reap := make(map[gracefulKey]op, p.graceful.Len())
	for k, it := range p.graceful.items {
		reap[k] = rsOp(opReapRS, &it.vs, it.rs)
	}
	for i := range ops {
		o := &ops[i]
		if o.vs == nil {
			continue // not a virtual or real server op
		}
		k := gracefulKey{o.vs.Key(), o.rs}
		switch {
		case o.kind == opAdoptDrain, o.kind == opUpdateRS && o.weight == 0:
			reap[k] = op{kind: opReapRS, weight: o.weight, vs: o.vs, rs: o.rs}
		case o.kind == opUpdateRS, o.kind == opAddRS, o.kind == opDelRS:
			delete(reap, k)
		case o.kind == opDelVS:
			for rk := range reap {
				if rk.vs == k.vs {
					delete(reap, rk)
				}
			}
		}
	}
	if len(reap) == 0 {
		return ops
	}
	n := len(ops)
	for _, o := range reap {
		ops = append(ops, o)
	}
	sortOps(ops[n:])
	return ops
}

// reaper runs the reap ops of one apply: it lists each draining virtual
// server's real servers once (reap ops come sorted by virtual server) and
// deletes those whose connections ended or whose deadline passed, as
// kube-proxy's graceful termination does.
type reaper struct {
	q       *gracefulQueue
	ipvs    Interface
	now     time.Time
	listed  VirtualServerKey
	listing map[netip.AddrPort]*RealServer
	listErr error
}

// reap runs one reap op; deleted reports whether it deleted the real
// server. Failed items stay queued for the next sync.
func (r *reaper) reap(o *op) (deleted bool, err error) {
	vsKey, ap := o.vs.Key(), o.rs
	it := r.q.get(vsKey, ap)
	if it == nil {
		return false, nil // taken back or deleted by an earlier op
	}
	if r.listing == nil || r.listed != vsKey {
		r.listed, r.listing = vsKey, nil
		current, err := r.ipvs.GetRealServers(&it.vs)
		r.listErr = err
		if err == nil {
			r.listing = make(map[netip.AddrPort]*RealServer, len(current))
			for _, rs := range current {
				r.listing[rs.AddrPort()] = rs
			}
		}
	}
	if r.listErr != nil {
		if isNotFound(r.listErr) {
			r.q.removeVS(vsKey) // the virtual server is gone, and its real servers with it
			return false, nil
		}
		return false, r.listErr
	}
	cur, ok := r.listing[ap]
	switch {
	case !ok:
		r.q.remove(vsKey, ap)
		return false, nil
	case cur.Weight > 0:
		// someone (a newer plan) took it back into service
		r.q.remove(vsKey, ap)
		return false, nil
	case cur.ActiveConn+cur.InactiveConn > 0 && r.now.Before(it.deadline):
		return false, nil
	}
	if err := r.ipvs.DeleteRealServer(&it.vs, cur); err != nil && !isNotFound(err) {
		return false, err
	}
	r.q.remove(vsKey, ap)
	return true, nil
}
