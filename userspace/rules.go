package userspace

import (
	"context"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// serviceRules resolves one service port's capture rules from its plan
// and open sockets (nil for a service that is gone).
func (p *Proxier) serviceRules(name proxy.ServicePortName) []captureRule {
	st := p.svc.services[name]
	if st == nil {
		return nil
	}
	ports := make(map[listenerID]int, len(st.listeners))
	for id, ls := range st.listeners {
		ports[id] = int(ls.sock.Addr().Port())
	}
	return resolveRules(st.plan, ports, p.cfg.ListenAddress, p.hostIP)
}

// syncRules writes the capture rules: everything (our chains declared,
// hence flushed, and refilled, canaries included) when full or when the
// last write failed, otherwise -D/-A lines for the dirty service ports
// only. It returns the number of rule lines written.
func (p *Proxier) syncRules(ctx context.Context, full bool) (int, error) {
	rs := &p.rules
	ipt := p.ifs.IPTables
	rs.buf.Reset()
	full = full || !rs.valid
	written := map[proxy.ServicePortName][]captureRule{}
	lines := 0
	if full {
		var all []captureRule
		for name := range p.svc.services {
			if rules := p.serviceRules(name); len(rules) > 0 {
				written[name] = rules
				all = append(all, rules...)
			}
		}
		sortRules(all)
		if err := ensureJumps(ctx, ipt); err != nil {
			rs.valid = false
			return 0, fmt.Errorf("userspace: installing capture chains: %w", err)
		}
		renderRestore(&rs.buf, all)
		lines = len(all) + len(canaries)
	} else {
		var del, add []captureRule
		for name := range rs.dirty {
			rules := p.serviceRules(name)
			if old := rs.written[name]; !slices.EqualFunc(old, rules, captureRule.equal) {
				del = append(del, old...)
				add = append(add, rules...)
			}
			written[name] = rules
		}
		if len(del) == 0 && len(add) == 0 {
			clear(rs.dirty)
			return 0, nil
		}
		renderChanges(&rs.buf, del, add)
		lines = len(del) + len(add)
	}
	if full {
		// The in-process writer reads back what a full sync writes.
		ipt.CheckNextRestore()
	}
	if err := ipt.Restore(ctx, xtables.RestoreInput{Text: rs.buf.Bytes()}); err != nil {
		p.cfg.Metrics.IncIPTablesRestoreFailures(p.cfg.IPFamily)
		rs.valid = false
		return 0, fmt.Errorf("userspace: writing capture rules: %w", err)
	}
	if full {
		clear(rs.written)
		clear(rs.count)
	}
	for name, rules := range written {
		for _, r := range rs.written[name] {
			rs.count[r.table]--
		}
		for _, r := range rules {
			rs.count[r.table]++
		}
		if len(rules) == 0 {
			delete(rs.written, name)
		} else {
			rs.written[name] = rules
		}
	}
	clear(rs.dirty)
	rs.valid = true
	p.cfg.Metrics.SetIPTablesRules(p.cfg.IPFamily, metrics.TableNAT, rs.count[xtables.TableNAT])
	p.cfg.Metrics.SetIPTablesRules(p.cfg.IPFamily, metrics.TableFilter, rs.count[xtables.TableFilter])
	return lines, nil
}

// drifted is Hooks.Drifted (CaptureIPTables only): it checks the canary
// rule that every full write puts in our nat and filter chains (one
// iptables -C each). A flush of the nat or filter table, or of our chains,
// or their deletion, removes it; the base then syncs in full at once,
// which rewrites the jumps and chains. Checking re-adds a missing canary
// (iptables has no read-only check of one rule that the runner exposes);
// it matches nothing and the full sync that follows rewrites the chain.
func (p *Proxier) drifted(ctx context.Context) (bool, error) {
	if !p.rules.valid {
		return false, nil // a full write is due anyway
	}
	ipt := p.ifs.IPTables
	for _, c := range canaries {
		existed, err := ipt.EnsureRule(ctx, xtables.Append, c.table, c.chain, c.args...)
		if err == nil && existed {
			continue
		}
		if err != nil {
			// A deleted chain cannot hold the rule: drift. Anything else
			// (the xtables lock held, say) is an error of the check.
			if ok, cerr := ipt.ChainExists(ctx, c.table, c.chain); cerr != nil || ok {
				return false, fmt.Errorf("userspace: checking the canary in %s/%s: %w", c.table, c.chain, err)
			}
		}
		p.log.Info("Capture rules changed behind our back; rewriting them", "table", c.table, "chain", c.chain)
		p.rules.valid = false
		return true, nil
	}
	return false, nil
}
