package iptables_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

// The health servers of proxy/healthcheck fit the engine's interfaces.
var (
	_ engine.HealthServer        = (*healthcheck.ProxyHealthServer)(nil)
	_ engine.ServiceHealthServer = (*healthcheck.ServiceHealthServer)(nil)
	_ engine.ServiceHealthServer = (*healthcheck.FamilyView)(nil)
)

type healthRecorder struct {
	queued, updated int
	services        map[types.NamespacedName]uint16
	endpoints       map[types.NamespacedName]int
}

func (h *healthRecorder) QueuedUpdate(v1.IPFamily) { h.queued++ }
func (h *healthRecorder) Updated(v1.IPFamily)      { h.updated++ }
func (h *healthRecorder) SyncServices(m map[types.NamespacedName]uint16) error {
	h.services = m
	return nil
}
func (h *healthRecorder) SyncEndpoints(m map[types.NamespacedName]int) error {
	h.endpoints = m
	return nil
}

func TestHealthServersUpdated(t *testing.T) {
	h := &healthRecorder{}
	cfg := ipv4Config
	cfg.HealthServer, cfg.ServiceHealthServer = h, h
	p, _ := newTestProxier(t, cfg, v1.IPv4Protocol)
	p.OnServiceAdd(svc("ns", "lb", "172.30.0.9", loadBalancer(30009, "1.1.1.9"), etpLocal(31009)))
	p.OnEndpointSliceAdd(slice("ns", "lb", "", ep{ip: "10.0.0.9", node: testNode}, ep{ip: "10.0.0.10"}))
	mustSync(t, p)
	nn := types.NamespacedName{Namespace: "ns", Name: "lb"}
	if h.queued == 0 || h.updated != 1 {
		t.Errorf("QueuedUpdate %d times, Updated %d times; want >0 and 1", h.queued, h.updated)
	}
	if h.services[nn] != 31009 || h.endpoints[nn] != 1 {
		t.Errorf("health-check services %v, local endpoints %v; want port 31009 and 1 local endpoint", h.services, h.endpoints)
	}
}
