package iptables

import (
	"bytes"
	"context"
	"errors"
	"slices"
)

// Cleanup removes everything this engine, or kube-proxy's iptables mode,
// creates: the jump rules from the built-in chains, the fixed KUBE-*
// chains of nat and filter, every per-service chain (KUBE-SVC-, KUBE-SVL-,
// KUBE-EXT-, KUBE-FW-, KUBE-SEP-) and the KUBE-PROXY-CANARY chains. Other
// chains and rules (the kubelet's KUBE-KUBELET-CANARY, KUBE-FIREWALL, other
// software's) are left alone. It returns the first error, after trying
// everything.
func Cleanup(ctx context.Context, ipt Runner) error {
	var errs []error
	for _, j := range jumpRules {
		if err := ipt.DeleteRule(ctx, j.table, j.from, j.args()...); err != nil {
			errs = append(errs, err)
		}
	}
	var buf bytes.Buffer
	var w lineWriter
	for _, table := range []Table{TableNAT, TableFilter, TableMangle} {
		buf.Reset()
		if err := ipt.SaveInto(ctx, table, &buf); err != nil {
			errs = append(errs, err)
			continue
		}
		existing := chainsInSave(buf.Bytes())
		var doomed []Chain
		for c := range existing {
			if isServiceChain(string(c)) || c == ChainKubeProxyCanary ||
				(table == TableNAT && slices.Contains(fixedNATChains, c)) ||
				(table == TableFilter && slices.Contains(fixedFilterChains, c)) {
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
		if err := ipt.Restore(ctx, w.buf); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
