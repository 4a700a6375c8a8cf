package iptables

import (
	"bytes"
	"context"
	"errors"
	"slices"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// cleanup is the Cleanup hook. It removes everything this engine, or
// kube-proxy's iptables mode, creates: the jump rules from the built-in
// chains, the fixed KUBE-* chains of nat and filter, every per-service
// chain (KUBE-SVC-, KUBE-SVL-, KUBE-EXT-, KUBE-FW-, KUBE-SEP-) and the
// KUBE-PROXY-CANARY chains. Other chains and rules (the kubelet's
// KUBE-KUBELET-CANARY, KUBE-FIREWALL, other software's) are left alone. It
// returns the errors joined, after trying everything; the next sync is
// full and starts from nothing.
func (p *Proxier) cleanup(ctx context.Context) error {
	p.r.applied, p.r.byName = nil, nil
	p.wrote = false
	clear(p.stamps)
	return cleanupRules(ctx, p.ipt)
}

func cleanupRules(ctx context.Context, ipt xtables.Runner) error {
	var errs []error
	if err := xtables.DeleteJumpRules(ctx, ipt, jumpRules); err != nil {
		errs = append(errs, err)
	}
	var buf bytes.Buffer
	var w lineWriter
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter, xtables.TableMangle} {
		buf.Reset()
		if err := ipt.SaveInto(ctx, table, &buf); err != nil {
			errs = append(errs, err)
			continue
		}
		existing := xtables.ParseListing(buf.Bytes(), table).Chains
		var doomed []xtables.Chain
		for c := range existing {
			if isServiceChain(string(c)) || c == xtables.ChainKubeProxyCanary ||
				(table == xtables.TableNAT && slices.Contains(fixedNATChains, c)) ||
				(table == xtables.TableFilter && slices.Contains(fixedFilterChains, c)) {
				doomed = append(doomed, c)
			}
		}
		if len(doomed) == 0 {
			continue
		}
		slices.Sort(doomed)
		w.reset()
		w.raw("*" + string(table))
		for _, c := range doomed {
			w.chainLine(c)
		}
		for _, c := range doomed {
			w.op("-X", c).end()
		}
		w.raw("COMMIT")
		if err := ipt.Restore(ctx, xtables.RestoreInput{Text: w.buf}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
