package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
)

// The chain names are kube-proxy's: "KUBE-SEP-" + the first 16 characters
// of base32(sha256("ns/name:port" + "tcp" + "ip:port")), and so on; the
// allocation-free hashing must give exactly those.
func TestChainNamesAreKubeProxys(t *testing.T) {
	ref := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return base32.StdEncoding.EncodeToString(sum[:])[:16]
	}
	names := []proxy.ServicePortName{
		{NamespacedName: types.NamespacedName{Namespace: "ns1", Name: "svc1"}, Port: "p80", Protocol: v1.ProtocolTCP},
		{NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, Port: "dns", Protocol: v1.ProtocolUDP},
		{NamespacedName: types.NamespacedName{Namespace: "a", Name: "b"}, Port: "", Protocol: v1.ProtocolSCTP},
		{NamespacedName: types.NamespacedName{Namespace: "a", Name: "b"}, Port: "x", Protocol: "Other"},
		{NamespacedName: types.NamespacedName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63)}, Port: strings.Repeat("p", 15), Protocol: v1.ProtocolTCP},
		{NamespacedName: types.NamespacedName{Namespace: strings.Repeat("n", 200), Name: "long"}, Port: "p", Protocol: v1.ProtocolTCP},
	}
	endpoints := []string{"10.180.0.1:80", "[2001:db8::1]:8080", "[fe80::1%eth0]:53", ":0"}
	for _, n := range names {
		key := n.String() + strings.ToLower(string(n.Protocol))
		got := makeServiceChainNames(n)
		if want := "KUBE-SVC-" + ref(key); string(got.cluster) != want {
			t.Errorf("%v: cluster chain %s, want %s", n, got.cluster, want)
		}
		if want := "KUBE-FW-" + ref(key); string(got.firewall) != want {
			t.Errorf("%v: firewall chain %s, want %s", n, got.firewall, want)
		}
		for _, ep := range endpoints {
			if got, want := string(endpointChainName(n, ep)), "KUBE-SEP-"+ref(key+ep); got != want {
				t.Errorf("%v %s: endpoint chain %s, want %s", n, ep, got, want)
			}
		}
	}
}

func TestEndpointInfoStrings(t *testing.T) {
	name := proxy.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "svc"}, Port: "p", Protocol: v1.ProtocolTCP}
	for _, a := range []string{"10.0.0.1", "2001:db8::1", "fe80::1%eth0", "::ffff:10.0.0.1", "::"} {
		base := &proxy.BaseEndpoint{Addr: netip.MustParseAddr(a), PortNum: 8080}
		e := newEndpointInfo(base, &name)
		if e.str != base.String() || e.ipStr != base.Addr.String() {
			t.Errorf("%s: str %q ipStr %q, want %q %q", a, e.str, e.ipStr, base.String(), base.Addr.String())
		}
		if want := endpointChainName(name, base.String()); e.chain != want {
			t.Errorf("%s: chain %s, want %s", a, e.chain, want)
		}
	}
	e := newEndpointInfo(&proxy.BaseEndpoint{PortNum: 80}, &name)
	if e.ipStr != (netip.Addr{}).String() {
		t.Errorf("invalid address: ipStr %q", e.ipStr)
	}
}
