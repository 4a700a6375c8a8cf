package main

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/proxy/runner"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

// withHealthUpdates drives an engine that does not report to the proxy
// health server itself (the userspace engine takes no HealthServer): every handler call marks an update as queued and triggers
// a sync, and each successful Sync marks it done, so /healthz means the
// same thing in every mode. Run replaces the engine's own loop with the
// same bounded-frequency runner the engines use.
type withHealthUpdates struct {
	proxy.Provider
	health  *healthcheck.ProxyHealthServer
	family  v1.IPFamily
	minSync time.Duration
	sync    time.Duration
	log     logr.Logger
	r       *runner.Runner
}

// newWithHealthUpdates wraps p; health may be nil (dry runs), then p is returned.
func newWithHealthUpdates(p proxy.Provider, health *healthcheck.ProxyHealthServer, family v1.IPFamily, minSync, sync time.Duration, log logr.Logger) proxy.Provider {
	if health == nil {
		return p
	}
	w := &withHealthUpdates{Provider: p, health: health, family: family, minSync: minSync, sync: sync, log: log}
	w.r = runner.New("sync-"+string(family), w.syncOnce, runner.Config{
		MinInterval: max(minSync, 0),
		MaxInterval: sync,
		Logger:      log,
	})
	return w
}

func (w *withHealthUpdates) syncOnce(ctx context.Context) error {
	err := w.Provider.Sync(ctx)
	switch {
	case err == nil:
		w.health.Updated(w.family)
	case errors.Is(err, proxy.ErrNotSynced):
		return nil // nothing to do until the initial lists arrive
	}
	return err
}

func (w *withHealthUpdates) Sync(ctx context.Context) error {
	err := w.Provider.Sync(ctx)
	if err == nil {
		w.health.Updated(w.family)
	}
	return err
}

func (w *withHealthUpdates) Run(ctx context.Context) error { return w.r.Run(ctx) }

func (w *withHealthUpdates) changed() {
	w.health.QueuedUpdate(w.family)
	w.r.Trigger()
}

func (w *withHealthUpdates) OnServiceAdd(s *v1.Service) { w.Provider.OnServiceAdd(s); w.changed() }
func (w *withHealthUpdates) OnServiceUpdate(o, s *v1.Service) {
	w.Provider.OnServiceUpdate(o, s)
	w.changed()
}
func (w *withHealthUpdates) OnServiceDelete(s *v1.Service) {
	w.Provider.OnServiceDelete(s)
	w.changed()
}
func (w *withHealthUpdates) OnServiceSynced() { w.Provider.OnServiceSynced(); w.changed() }
func (w *withHealthUpdates) OnEndpointSliceAdd(s *discovery.EndpointSlice) {
	w.Provider.OnEndpointSliceAdd(s)
	w.changed()
}
func (w *withHealthUpdates) OnEndpointSliceUpdate(o, s *discovery.EndpointSlice) {
	w.Provider.OnEndpointSliceUpdate(o, s)
	w.changed()
}
func (w *withHealthUpdates) OnEndpointSliceDelete(s *discovery.EndpointSlice) {
	w.Provider.OnEndpointSliceDelete(s)
	w.changed()
}
func (w *withHealthUpdates) OnEndpointSlicesSynced() {
	w.Provider.OnEndpointSlicesSynced()
	w.changed()
}
func (w *withHealthUpdates) OnNodeAdd(n *v1.Node)       { w.Provider.OnNodeAdd(n); w.changed() }
func (w *withHealthUpdates) OnNodeUpdate(o, n *v1.Node) { w.Provider.OnNodeUpdate(o, n); w.changed() }
func (w *withHealthUpdates) OnNodeDelete(n *v1.Node)    { w.Provider.OnNodeDelete(n); w.changed() }
