//go:build linux

package nftables

import (
	"fmt"
	"testing"
)

// The self-check reads back at most selfCheckChains chains of a batch:
// one of each kind first, then the last and chains spread over the rest,
// never one twice.
func TestSelfCheckSample(t *testing.T) {
	var want []*chainSpec
	for i := range 100 {
		want = append(want, &chainSpec{name: fmt.Sprintf("service-%03d", i)})
	}
	want[40].name = "external-040"
	want[70].name = "endpoint-070"
	got := selfCheckSample(want, 4)
	var names []string
	seen := map[string]bool{}
	for _, c := range got {
		if seen[c.name] {
			t.Errorf("%s sampled twice", c.name)
		}
		seen[c.name] = true
		names = append(names, c.name)
	}
	if fmt.Sprint(names) != "[service-000 external-040 endpoint-070 service-099]" {
		t.Errorf("sample = %v", names)
	}
	if got := selfCheckSample(want[:3], 4); len(got) != 3 {
		t.Errorf("a batch of 3 chains: %d read back, want all 3", len(got))
	}
	for k := 1; k <= 10; k++ {
		if got := selfCheckSample(want[:12], k); len(got) != k {
			t.Errorf("k=%d: %d sampled", k, len(got))
		}
	}
}

// parseChainListings reads nft -i's documents, one per chain listed, and
// fails on output that is not JSON (a prompt, say) rather than reporting
// chains as missing.
func TestParseChainListings(t *testing.T) {
	out := `{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"chain": {"family": "ip", "table": "kube-proxy", "name": "a", "handle": 1}}, {"rule": {"family": "ip", "table": "kube-proxy", "chain": "a", "handle": 4, "comment": "svcproxy:H", "expr": []}}, {"rule": {"family": "ip", "table": "kube-proxy", "chain": "a", "handle": 5, "expr": []}}]}
{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"chain": {"family": "ip", "table": "kube-proxy", "name": "c", "handle": 3}}]}
`
	got, err := parseChainListings([]byte(out), []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got["a"]) != 2 || got["c"] == nil || len(got["c"]) != 0 {
		t.Fatalf("got %v, want a with 2 rules and c empty (b not listed)", got)
	}
	if r := got["a"][0]; r.Comment == nil || *r.Comment != "svcproxy:H" || r.Handle == nil || *r.Handle != 4 || got["a"][1].Comment != nil {
		t.Errorf("rules of a: %+v %+v", got["a"][0], got["a"][1])
	}
	if _, err := parseChainListings([]byte("nft> "+out), []string{"a"}); err == nil {
		t.Error("output with a prompt parsed")
	}
}
