package ipvs_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// TestRunSyncsOnChange: Run syncs after a change and returns when its
// context ends.
func TestRunSyncsOnChange(t *testing.T) {
	e := newEnv(t, config(engine.Common{MinSyncPeriod: -1, Clock: clock.RealClock{}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx) }()
	e.synced()
	e.p.OnServiceAdd(service("default", "web", "10.96.0.10", 80))
	e.p.OnEndpointSliceAdd(slice("default", "web", 8080, v1.ProtocolTCP, ready("10.244.1.5", testNode)))
	key := ipvs.VirtualServerKey{Address: netip.MustParseAddr("10.96.0.10"), Protocol: v1.ProtocolTCP, Port: 80}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, rss, ok := e.ipvs.Lookup(key); ok && len(rss) == 1 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("Run did not program the service within 20s:\n%s", e.ipvs.Dump())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
