package ipvs

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	"github.com/svcproxy/svcproxy/internal/lines"
	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// Drift detection (engine.Hooks.Drifted), run by the base every
// Common.DriftCheckInterval between full syncs. It must be cheap, so it
// looks at what a hand flush or a firewall reload destroys, not at every
// virtual server:
//
//   - our iptables rules: the number of rules in each of our chains and of
//     our jump rules in the built-in chains, per table, against what was
//     read back right after the last full sync restored them (one
//     iptables-save per table; `iptables -t nat -F`, a flush of one of our
//     chains, or a deleted chain all change a count);
//   - kube-ipvs0: the link exists and holds every service address we bound
//     (one address listing).
//
// A drift makes the base run a full sync at once, which rewrites the
// ruleset and diffs the IPVS table, sets and addresses with the kernel.

// ruleCounts maps "table chain" (our chains) or "table chain -> target"
// (our jump rules in built-in chains) to a number of rules.
type ruleCounts map[string]int

// builtinChains are where our jump rules live; jumps to our chains from
// other chains (someone else's, or an iptables-mode leftover) are not
// ours to watch.
var builtinChains = map[string]bool{
	string(xtables.ChainPrerouting): true, string(xtables.ChainInput): true, string(xtables.ChainForward): true,
	string(xtables.ChainOutput): true, string(xtables.ChainPostrouting): true,
}

// ourChains are the chains of our fixed ruleset, per table.
var ourChains = map[xtables.Table]map[string]bool{
	xtables.TableNAT:    chainSet(natChains),
	xtables.TableFilter: chainSet(filterChains),
}

func chainSet(cs []xtables.Chain) map[string]bool {
	m := make(map[string]bool, len(cs))
	for _, c := range cs {
		m[string(c)] = true
	}
	return m
}

// readRuleCounts lists the nat and filter tables and counts our rules.
func (p *Proxier) readRuleCounts(ctx context.Context) (ruleCounts, error) {
	counts := make(ruleCounts)
	var buf bytes.Buffer
	for _, t := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		buf.Reset()
		if err := p.ifs.IPTables.SaveInto(ctx, t, &buf); err != nil {
			return nil, fmt.Errorf("ipvs: iptables-save -t %s: %w", t, err)
		}
		countRules(buf.Bytes(), string(t), ourChains[t], counts)
	}
	return counts, nil
}

// countRules adds the "-A chain ..." lines of one table's iptables-save
// listing to counts: every rule of our chains, and the rules of the
// built-in chains whose target (-j) is one of ours.
func countRules(save []byte, table string, ours map[string]bool, counts ruleCounts) {
	sc := lines.New(save)
	for sc.Scan() {
		line := sc.Line()
		if !bytes.HasPrefix(line, []byte("-A ")) {
			continue
		}
		rest := line[3:]
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		chain := string(rest[:end])
		if ours[chain] {
			counts[table+" "+chain]++
			continue
		}
		if !builtinChains[chain] {
			continue
		}
		if j := bytes.LastIndex(rest, []byte(" -j ")); j >= 0 {
			target := rest[j+4:]
			if k := bytes.IndexByte(target, ' '); k >= 0 {
				target = target[:k]
			}
			if ours[string(target)] {
				counts[table+" "+chain+" -> "+string(target)]++
			}
		}
	}
}

// recordCanary reads back what the full sync's restore left, for the
// drift check to compare with. A failed read only disables the check
// until the next full sync.
func (p *Proxier) recordCanary(ctx context.Context) {
	counts, err := p.readRuleCounts(ctx)
	if err != nil {
		p.log.Error(err, "Reading back our iptables rules for the drift check; checking only kube-ipvs0 until the next full sync")
		p.canary = nil
		return
	}
	p.canary = counts
}

// drifted is engine.Hooks.Drifted: whether our iptables rules or our
// kube-ipvs0 addresses changed since the last sync.
func (p *Proxier) drifted(ctx context.Context) (bool, error) {
	if p.canary != nil {
		counts, err := p.readRuleCounts(ctx)
		if err != nil {
			return false, err
		}
		if !maps.Equal(counts, p.canary) {
			p.log.V(2).Info("Our iptables rules changed behind our back", "want", p.canary, "have", counts)
			return true, nil
		}
	}
	addrs, err := p.ifs.Netlink.ListBindAddresses(DummyDevice)
	if isNotFound(err) {
		p.log.V(2).Info("The dummy link is gone", "link", DummyDevice)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("ipvs: list %s addresses: %w", DummyDevice, err)
	}
	if len(addrs) < len(p.dp.addrs) {
		p.log.V(2).Info("Service addresses were removed from the dummy link", "link", DummyDevice, "want", len(p.dp.addrs), "have", len(addrs))
		return true, nil
	}
	bound := make(map[[16]byte]struct{}, len(addrs))
	for _, a := range addrs {
		bound[a.Unmap().As16()] = struct{}{}
	}
	for a := range p.dp.addrs {
		if _, ok := bound[a.As16()]; !ok {
			p.log.V(2).Info("A service address was removed from the dummy link", "link", DummyDevice, "address", a)
			return true, nil
		}
	}
	return false, nil
}
