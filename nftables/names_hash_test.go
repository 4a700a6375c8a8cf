//go:build linux

package nftables

import (
	"hash/fnv"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
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

// The chain names built without garbage (namesFor) must be upstream's:
// prefix + hashAndTruncate("namespace/name/proto/port"), truncated names
// included (a different name would make a restart rewrite every chain and
// break the move between upstream and us).
func TestServicePortNamesAreUpstreams(t *testing.T) {
	long := strings.Repeat("n", 63)
	for _, spn := range []proxy.ServicePortName{
		{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Port: "p80", Protocol: v1.ProtocolTCP},
		{NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, Port: "dns", Protocol: v1.ProtocolUDP},
		{NamespacedName: types.NamespacedName{Namespace: long, Name: long}, Port: strings.Repeat("p", 15), Protocol: v1.ProtocolSCTP},
		{NamespacedName: types.NamespacedName{Namespace: long, Name: long + long + long}, Port: "", Protocol: v1.ProtocolTCP},
	} {
		base := hashAndTruncate(spn.Namespace + "/" + spn.Name + "/" + proxy.LowerProtocol(spn.Protocol) + "/" + spn.Port)
		want := portNames{cluster: prefixClusterChain + base, local: prefixLocalChain + base,
			external: prefixExternalChain + base, firewall: prefixFirewallChain + base}
		n := namesFor(spn, nil)
		if got := (portNames{cluster: n.cluster, local: n.localChain(), external: n.externalChain(), firewall: n.firewallChain()}); got != want {
			t.Errorf("%v: namesFor = %+v, want %+v", spn, got, want)
		}
		if w := namesFor(spn, makeServicePortForTest(spn)); w.cluster != want.cluster {
			t.Errorf("%v: the service port's cluster chain %q, want %q", spn, w.cluster, want.cluster)
		}
	}
}

func makeServicePortForTest(spn proxy.ServicePortName) proxy.ServicePort {
	return makeServicePort(&v1.ServicePort{Name: spn.Port, Protocol: spn.Protocol},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: spn.Namespace, Name: spn.Name}},
		&proxy.BaseServicePort{ProtocolValue: spn.Protocol})
}
