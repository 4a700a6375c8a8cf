//go:build linux

package nftables

import (
	"hash/fnv"
	"strconv"
	"testing"
)

// chainHash must stay what hash/fnv's FNV-1a gave over the same bytes: the
// hashes are in every table already written, and a different value would
// make a restart rewrite every chain.
func TestChainHashIsFNV1a(t *testing.T) {
	ref := func(base *baseChain, rules []ruleSpec) string {
		h := fnv.New64a()
		if base != nil {
			h.Write([]byte(base.typ + " " + base.hook + " " + base.priority))
			h.Write([]byte{2})
		}
		for _, r := range rules {
			h.Write([]byte(r.text()))
			h.Write([]byte{0})
			h.Write([]byte(r.comment()))
			h.Write([]byte{1})
		}
		return strconv.FormatUint(h.Sum64(), 36)
	}
	cases := []struct {
		base  *baseChain
		rules []ruleSpec
	}{
		{nil, nil},
		{nil, []ruleSpec{textRule("goto endpoint-X", "")}},
		{nil, []ruleSpec{textRule("ip saddr 10.0.0.1 jump mark-for-masquerade", "c"), textRule("meta l4proto tcp dnat to 10.0.0.1:80", "")}},
		{&baseChain{"filter", "input", "filter"}, []ruleSpec{textRule("ct state new jump services", "")}},
	}
	for i, c := range cases {
		if got, want := chainHash(c.base, c.rules), ref(c.base, c.rules); got != want {
			t.Errorf("case %d: chainHash = %s, hash/fnv gives %s", i, got, want)
		}
	}
}
