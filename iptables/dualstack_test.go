package iptables_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
)

// Two Proxiers combined with proxy.NewDualStack program each family's
// cluster IP into its own tables.
func TestDualStack(t *testing.T) {
	p4, f4 := newTestProxier(t, Config{}, v1.IPv4Protocol)
	p6, f6 := newTestProxier(t, Config{}, v1.IPv6Protocol)
	ds, err := proxy.NewDualStack(p4, p6)
	if err != nil {
		t.Fatal(err)
	}
	s := svc("ns", "ds", "172.30.0.7")
	s.Spec.ClusterIPs = []string{"172.30.0.7", "fd00:30::7"}
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	ds.OnServiceAdd(s)
	ds.OnEndpointSliceAdd(slice("ns", "ds", "", ep{ip: "10.1.0.1"}))
	ds.OnEndpointSliceAdd(func() *discovery.EndpointSlice {
		sl := slice("ns", "ds", "", ep{ip: "fd00:10::1"})
		sl.Name = "ds-2"
		return sl
	}())
	ds.OnServiceSynced()
	ds.OnEndpointSlicesSynced()
	if err := ds.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := f4.Dump(); !strings.Contains(d, "-d 172.30.0.7/32") || !strings.Contains(d, "10.1.0.1:80") || strings.Contains(d, "fd00") {
		t.Errorf("IPv4 tables:\n%s", d)
	}
	if d := f6.Dump(); !strings.Contains(d, "-d fd00:30::7/128") || !strings.Contains(d, "[fd00:10::1]:80") || strings.Contains(d, "172.30") {
		t.Errorf("IPv6 tables:\n%s", d)
	}
}
