package ipvs_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

var (
	_ engine.HealthServer        = (*healthcheck.ProxyHealthServer)(nil)
	_ engine.ServiceHealthServer = (*healthcheck.ServiceHealthServer)(nil)
)

type recordingHealth struct {
	queued, updated int
	ports           map[types.NamespacedName]uint16
	local           map[types.NamespacedName]int
}

func (r *recordingHealth) QueuedUpdate(v1.IPFamily) { r.queued++ }
func (r *recordingHealth) Updated(v1.IPFamily)      { r.updated++ }
func (r *recordingHealth) SyncServices(p map[types.NamespacedName]uint16) error {
	r.ports = p
	return nil
}
func (r *recordingHealth) SyncEndpoints(l map[types.NamespacedName]int) error {
	r.local = l
	return nil
}

func TestHealthServers(t *testing.T) {
	h := &recordingHealth{}
	e := newEnv(t, config(engine.Common{HealthServer: h, ServiceHealthServer: h}))
	e.p.OnServiceAdd(service("default", "lb", "10.96.0.2", 443, withLB(30443, "203.0.113.7"), withETPLocal(31000)))
	e.p.OnEndpointSliceAdd(slice("default", "lb", 8443, v1.ProtocolTCP, ready("10.244.1.8", testNode), ready("10.244.2.9", "node-b")))
	e.synced()
	e.sync(t)
	nn := types.NamespacedName{Namespace: "default", Name: "lb"}
	if h.queued == 0 || h.updated != 1 {
		t.Errorf("healthz: queued %d, updated %d", h.queued, h.updated)
	}
	if h.ports[nn] != 31000 || h.local[nn] != 1 {
		t.Errorf("service health: ports %v, local endpoints %v", h.ports, h.local)
	}
}
