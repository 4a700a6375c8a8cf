package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/iptables"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
func isExists(err error) bool   { return errors.Is(err, ErrExists) }

// apply runs every op, keeps going past failures, and returns the first
// error (with the number of failed ops).
func (p *Proxier) apply(ops opList) error {
	var first error
	failed := 0
	for i := range ops {
		if err := p.applyOp(&ops[i]); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		return fmt.Errorf("ipvs: %d of %d changes failed, first: %w", failed, len(ops), first)
	}
	return nil
}

func (p *Proxier) applyOp(o *op) error {
	ipvs := p.ifs.IPVS
	switch o.kind {
	case opCreateSet:
		if err := p.ifs.IPSet.CreateSet(o.set); err != nil && !isExists(err) {
			return err
		}
	case opAddVS:
		p.owned[o.vs.Key()] = struct{}{}
		err := ipvs.AddVirtualServer(&o.vs)
		if isExists(err) {
			err = ipvs.UpdateVirtualServer(&o.vs)
		}
		return err
	case opUpdateVS:
		return ipvs.UpdateVirtualServer(&o.vs)
	case opDelVS:
		p.graceful.removeVS(o.vs.Key())
		if err := ipvs.DeleteVirtualServer(&o.vs); err != nil && !isNotFound(err) {
			p.owned[o.vs.Key()] = struct{}{}
			return err
		}
		delete(p.owned, o.vs.Key())
		if o.vs.Protocol == v1.ProtocolUDP {
			p.conntrackFilters = append(p.conntrackFilters, conntrack.Filter{OrigDst: o.vs.Address, OrigDstPort: int(o.vs.Port)})
		}
	case opAddRS:
		err := ipvs.AddRealServer(&o.vs, &o.rs)
		if isExists(err) {
			err = ipvs.UpdateRealServer(&o.vs, &o.rs)
		}
		if err == nil {
			p.graceful.remove(o.vs.Key(), o.rs.AddrPort())
		}
		return err
	case opUpdateRS:
		if err := ipvs.UpdateRealServer(&o.vs, &o.rs); err != nil {
			return err
		}
		if o.rs.Weight == 0 {
			p.graceful.add(o.vs, o.rs, p.clock.Now().Add(p.cfg.GracefulTerminationPeriod))
		} else {
			p.graceful.remove(o.vs.Key(), o.rs.AddrPort())
		}
	case opDelRS:
		p.graceful.remove(o.vs.Key(), o.rs.AddrPort())
		if err := ipvs.DeleteRealServer(&o.vs, &o.rs); err != nil && !isNotFound(err) {
			return err
		}
		if o.vs.Protocol == v1.ProtocolUDP {
			p.conntrackFilters = append(p.conntrackFilters, conntrack.Filter{OrigDst: o.vs.Address, OrigDstPort: int(o.vs.Port), ReplySrc: o.rs.Address})
		}
	case opBind:
		_, err := p.ifs.Netlink.EnsureAddressBind(o.addr, DummyDevice)
		return err
	case opUnbind:
		if err := p.ifs.Netlink.UnbindAddress(o.addr, DummyDevice); err != nil && !isNotFound(err) {
			return err
		}
	case opAddEntry:
		if err := p.ifs.IPSet.AddEntry(o.set.Name, o.entry); err != nil && !isExists(err) {
			return err
		}
	case opDelEntry:
		if err := p.ifs.IPSet.DelEntry(o.set.Name, o.entry); err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}

// syncIPTables restores the fixed ruleset and hooks it into the built-in
// chains.
func (p *Proxier) syncIPTables(ctx context.Context) error {
	p.rulesBuf.Reset()
	writeRules(&p.rulesBuf, &p.cfg, p.ifs.IPTables.HasRandomFully())
	if err := p.ifs.IPTables.Restore(ctx, p.rulesBuf.Bytes()); err != nil {
		p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
		return fmt.Errorf("ipvs: iptables-restore: %w", err)
	}
	for _, j := range jumpRules {
		if _, err := p.ifs.IPTables.EnsureRule(ctx, iptables.Prepend, j.table, j.from, j.args()...); err != nil {
			return fmt.Errorf("ipvs: hook %s into %s/%s: %w", j.to, j.table, j.from, err)
		}
	}
	return nil
}

// clearConntrack removes stale UDP flows: to real servers deleted by this
// sync, to cluster IPs that went away, and to the addresses and node port
// of UDP services that went from no endpoints to some (their clients'
// earlier datagrams were answered or routed elsewhere, and the flow would
// stick to that). Failures are logged, never fatal: stale UDP flows also
// time out on their own.
func (p *Proxier) clearConntrack(u *changetracker.Update) {
	filters := p.conntrackFilters
	p.conntrackFilters = p.conntrackFilters[:0]
	for ip := range u.ServiceResult.DeletedUDPClusterIPs {
		filters = append(filters, conntrack.Filter{OrigDst: ip})
	}
	for _, name := range u.EndpointsResult.NewlyActiveUDPServices {
		svc, ok := u.Services[name]
		if !ok || svc.Protocol() != v1.ProtocolUDP {
			continue
		}
		addrs := append([]netip.Addr{svc.ClusterIP()}, svc.ExternalIPs()...)
		for _, ip := range append(addrs, svc.LoadBalancerVIPs()...) {
			if ip.IsValid() {
				filters = append(filters, conntrack.Filter{OrigDst: ip, OrigDstPort: svc.Port()})
			}
		}
		if np := svc.NodePort(); np != 0 {
			filters = append(filters, conntrack.Filter{OrigDstPort: np})
		}
	}
	if p.ifs.Conntrack == nil || len(filters) == 0 {
		return
	}
	n, err := p.ifs.Conntrack.DeleteUDP(p.cfg.IPFamily == v1.IPv6Protocol, filters)
	if err != nil {
		p.log.Error(err, "Clearing UDP conntrack entries failed", "filters", len(filters))
		return
	}
	p.log.V(4).Info("Cleared UDP conntrack entries", "deleted", n)
}
