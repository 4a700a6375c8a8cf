//go:build linux

package nftables

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"
)

// chainRulesLister lists the rules of several chains of the table for the
// self-check's read-back (fastpath.go), when set (NewInterfaces sets it).
// A chain missing from the result was not listed: missing from the table,
// or not read.
type chainRulesLister func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error)

// netlinkChainRulesLister reads the rules' comments of the kube-proxy
// table of family over netlink (netlinkRuleLister.ruleComments: a get and
// a rule dump per chain), in the calling thread's network namespace. It
// replaced one `nft --json list chain` process per sampled chain: nft
// reads the elements of every set of the table to list one chain: the
// four took 2 s of a cold start at 40,000 services (BENCHMARKS.md,
// 2026-12-02).
func netlinkChainRulesLister(family v1.IPFamily) chainRulesLister {
	l := NewNetlinkRuleLister(family).(*netlinkRuleLister)
	return func(ctx context.Context, chains []string) (map[string][]*knftables.Rule, error) {
		comments, err := l.ruleComments(ctx, chains)
		if err != nil {
			return nil, err
		}
		out := make(map[string][]*knftables.Rule, len(comments))
		for c, cs := range comments {
			rules := make([]*knftables.Rule, len(cs))
			for i, comment := range cs {
				rules[i] = &knftables.Rule{Chain: c, Comment: comment}
			}
			out[c] = rules
		}
		return out, nil
	}
}
