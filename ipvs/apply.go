package ipvs

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
func isExists(err error) bool   { return errors.Is(err, ErrExists) }

// execute runs every op, keeps going past failures, and returns the first
// error (with the number of failed ops). The Result counts the kernel
// writes made and carries the conntrack filters of the UDP virtual and
// real servers deleted.
func (p *Proxier) execute(ops opList) (engine.Result, error) {
	var res engine.Result
	var first error
	failed := 0
	r := &reaper{q: p.graceful, ipvs: p.ifs.IPVS, now: p.cfg.Clock.Now()}
	if len(p.owned) == 0 {
		// the first apply (a cold start adds every virtual server): size
		// the map of the ones we own once
		n := 0
		for i := range ops {
			if ops[i].kind == opAddVS {
				n++
			}
		}
		if n > 0 {
			p.owned = make(map[VirtualServerKey]struct{}, n)
		}
	}
	for i := range ops {
		wrote, err := p.applyOp(&ops[i], r, &res)
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
		if wrote {
			res.Writes++
		}
	}
	if first != nil {
		return res, fmt.Errorf("ipvs: %d of %d changes failed, first: %w", failed, len(ops), first)
	}
	return res, nil
}

// rsArg is the real server of o as the IPVS interface takes it, in a
// buffer of the proxier's (no allocation per call; the interface keeps no
// pointer it is given, and ops run one at a time).
func (p *Proxier) rsArg(o *op) *RealServer {
	p.rsBuf = o.realServer()
	return &p.rsBuf
}

// applyOp runs one op, and records what it means for the graceful queue and
// the virtual servers we own. wrote: it issued a kernel write.
func (p *Proxier) applyOp(o *op, r *reaper, res *engine.Result) (wrote bool, err error) {
	ipvs := p.ifs.IPVS
	switch o.kind {
	case opCreateSet:
		if err := p.ifs.IPSet.CreateSet(*o.set); err != nil && !isExists(err) {
			return true, err
		}
	case opAddVS:
		p.owned[o.vs.Key()] = struct{}{}
		err := ipvs.AddVirtualServer(o.vs)
		if isExists(err) {
			err = ipvs.UpdateVirtualServer(o.vs)
		}
		return true, err
	case opUpdateVS:
		return true, ipvs.UpdateVirtualServer(o.vs)
	case opDelVS:
		p.graceful.removeVS(o.vs.Key())
		if err := ipvs.DeleteVirtualServer(o.vs); err != nil && !isNotFound(err) {
			p.owned[o.vs.Key()] = struct{}{}
			return true, err
		}
		delete(p.owned, o.vs.Key())
		if o.vs.Protocol == v1.ProtocolUDP {
			res.Conntrack = append(res.Conntrack, conntrack.Filter{OrigDst: o.vs.Address, OrigDstPort: int(o.vs.Port)})
		}
	case opAddRS:
		err := ipvs.AddRealServer(o.vs, p.rsArg(o))
		if isExists(err) {
			err = ipvs.UpdateRealServer(o.vs, p.rsArg(o))
		}
		if err == nil {
			p.graceful.remove(o.vs.Key(), o.rs)
		}
		return true, err
	case opUpdateRS:
		if err := ipvs.UpdateRealServer(o.vs, p.rsArg(o)); err != nil {
			return true, err
		}
		if o.weight == 0 {
			p.graceful.add(*o.vs, o.realServer(), r.now.Add(p.cfg.GracefulTerminationPeriod))
		} else {
			p.graceful.remove(o.vs.Key(), o.rs)
		}
	case opDelRS:
		p.graceful.remove(o.vs.Key(), o.rs)
		if err := ipvs.DeleteRealServer(o.vs, p.rsArg(o)); err != nil && !isNotFound(err) {
			return true, err
		}
		if o.vs.Protocol == v1.ProtocolUDP {
			res.Conntrack = append(res.Conntrack, conntrack.Filter{OrigDst: o.vs.Address, OrigDstPort: int(o.vs.Port), ReplySrc: o.rs.Addr()})
		}
	case opBind:
		_, err := p.ifs.Netlink.EnsureAddressBind(o.addr(), DummyDevice)
		return true, err
	case opUnbind:
		if err := p.ifs.Netlink.UnbindAddress(o.addr(), DummyDevice); err != nil && !isNotFound(err) {
			return true, err
		}
	case opAddEntry:
		if err := p.ifs.IPSet.AddEntry(o.set.Name, *o.entry); err != nil && !isExists(err) {
			return true, err
		}
	case opDelEntry:
		if err := p.ifs.IPSet.DelEntry(o.set.Name, *o.entry); err != nil && !isNotFound(err) {
			return true, err
		}
	case opAdoptDrain:
		p.graceful.add(*o.vs, o.realServer(), r.now.Add(p.cfg.GracefulTerminationPeriod))
		return false, nil
	case opReapRS:
		return r.reap(o)
	}
	return true, nil
}

// syncIPTables restores the fixed ruleset, hooks it into the built-in
// chains and records what the drift check compares with. One listing per
// table serves both: the jump rules it shows need no command, and its rule
// counts are the canary (listed again only if a jump rule had to be added).
func (p *Proxier) syncIPTables(ctx context.Context) error {
	ipt := p.ifs.IPTables
	p.rulesBuf.Reset()
	writeRules(&p.rulesBuf, &p.cfg, true) // --random-fully always, as kube-proxy v1.37
	// A full sync: the in-process writer reads back what it writes.
	ipt.CheckNextRestore()
	if err := ipt.Restore(ctx, xtables.RestoreInput{Text: p.rulesBuf.Bytes()}); err != nil {
		p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
		return fmt.Errorf("ipvs: iptables-restore: %w", err)
	}
	p.canary = nil
	listed := make(map[xtables.Table]*xtables.Listing, 2)
	counts := make(ruleCounts)
	for _, t := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		p.rulesBuf.Reset()
		if err := ipt.SaveInto(ctx, t, &p.rulesBuf); err != nil {
			// not fatal: hook in rule by rule, check drift next time
			p.log.Error(err, "Listing iptables; checking the jump rules one by one", "table", t)
			listed, counts = nil, nil
			break
		}
		listed[t] = xtables.ParseListing(p.rulesBuf.Bytes(), t, xtables.JumpSources(jumpRules, t)...)
		countRules(p.rulesBuf.Bytes(), string(t), ourChains[t], counts)
	}
	missing := listed == nil
	for _, j := range jumpRules {
		missing = missing || !listed[j.Table].HasJump(j)
	}
	if err := xtables.EnsureJumpRules(ctx, ipt, xtables.Prepend, jumpRules, listed); err != nil {
		return fmt.Errorf("ipvs: %w", err)
	}
	if missing {
		p.recordCanary(ctx)
	} else {
		p.canary = counts
	}
	return nil
}
