//go:build linux

package nftables_test

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/nftkernel"
)

// TestKernelRuleCommentsNetlink: the self-check's netlink read-back lists
// each chain's rules in order with their comments, an empty chain as
// empty, and leaves out a chain the table lacks.
func TestKernelRuleCommentsNetlink(t *testing.T) {
	inFreshNetns(t, func() {
		nft(t, "add", "table", "ip", "kube-proxy")
		for _, cmd := range [][]string{
			{"add", "chain", "ip", "kube-proxy", "service-A/ns/tcp/p"},
			{"add", "chain", "ip", "kube-proxy", "endpoint-B__10.0.0.1/80"},
			{"add", "chain", "ip", "kube-proxy", "empty"},
			{"add", "rule", "ip", "kube-proxy", "service-A/ns/tcp/p", "numgen", "random", "mod", "2", "0", "meta", "l4proto", "tcp", "dnat", "to", "10.0.0.1:80", "comment", `"svcproxy:H1"`},
			{"add", "rule", "ip", "kube-proxy", "service-A/ns/tcp/p", "meta", "l4proto", "tcp", "dnat", "to", "10.0.0.2:80"},
			{"add", "rule", "ip", "kube-proxy", "endpoint-B__10.0.0.1/80", "meta", "l4proto", "tcp", "dnat", "to", "10.0.0.1:80", "comment", `"svcproxy:H2"`},
		} {
			nft(t, cmd...)
		}
		listed, err := nftkernel.NewNetlinkRuleLister(v1.IPv4Protocol).RuleComments(context.Background(),
			[]string{"service-A/ns/tcp/p", "missing", "endpoint-B__10.0.0.1/80", "empty"})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for c, comments := range listed {
			got[c] = []string{}
			for _, comment := range comments {
				if comment == nil {
					got[c] = append(got[c], "-")
				} else {
					got[c] = append(got[c], *comment)
				}
			}
		}
		want := map[string][]string{
			"service-A/ns/tcp/p":      {"svcproxy:H1", "-"},
			"endpoint-B__10.0.0.1/80": {"svcproxy:H2"},
			"empty":                   {},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("listed %v, want %v", got, want)
		}
	})
}
