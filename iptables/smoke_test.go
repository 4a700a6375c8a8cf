package iptables_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
)

func TestSmoke(t *testing.T) {
	p, fake := newTestProxier(t, Config{LocalDetector: LocalDetector{Mode: LocalModeClusterCIDR, CIDR: mustPrefix("10.0.0.0/8")}, NodeIPs: []netip.Addr{mustAddr("192.168.0.2")}}, v1.IPv4Protocol)
	p.OnServiceAdd(svc("ns1", "svc1", "172.30.0.41"))
	p.OnEndpointSliceAdd(slice("ns1", "svc1", "", ep{ip: "10.180.0.1"}))
	p.OnServiceAdd(svc("ns2", "svc2", "172.30.0.42", loadBalancer(3001, "1.2.3.4", "203.0.113.0/25"), etpLocal(30000)))
	p.OnEndpointSliceAdd(slice("ns2", "svc2", "", ep{ip: "10.180.0.2", node: testNode}, ep{ip: "10.180.1.2"}))
	p.OnServiceAdd(svc("ns3", "svc3", "172.30.0.43", nodePort(3003), affinity(100)))
	mustSync(t, p)
	t.Log(fake.Dump())
}
