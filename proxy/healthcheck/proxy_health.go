package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a node it is
// about to delete; /healthz reports such a node as not eligible so that
// load balancers drain it first.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// DefaultHealthTimeout is ProxyHealthConfig.HealthTimeout when unset:
// kube-proxy uses twice the sync period, which defaults to 30s.
const DefaultHealthTimeout = 60 * time.Second

// ProxyHealthConfig configures a ProxyHealthServer. Zero values: see fields.
type ProxyHealthConfig struct {
	// Addr is where Run listens, e.g. "0.0.0.0:10256" (kube-proxy's
	// healthzBindAddress). Only Run needs it; Handler works without.
	Addr string
	// HealthTimeout is how long a queued update may stay unsynced before
	// the proxy counts as unhealthy (0: DefaultHealthTimeout). Set it to
	// twice the engines' sync period, as kube-proxy does.
	HealthTimeout time.Duration
	// AssumeNodeEligible makes /healthz treat a node it has not heard of
	// as eligible; use it when there is no node source (e.g. an objects
	// file with no Node). By default, as in kube-proxy 1.34, an unknown
	// node is not eligible. A deleted node is never eligible.
	AssumeNodeEligible bool
	// Clock; nil means the real clock.
	Clock clock.PassiveClock
	// Listener; nil means StdListener.
	Listener Listener
	// Metrics counts answers (kubeproxy_proxy_healthz_total and
	// kubeproxy_proxy_livez_total); nil counts nothing.
	Metrics *metrics.Metrics
	// Logger; the zero value discards.
	Logger logr.Logger
}

// ProxierHealth is one IP family's part of ProxyHealth.
type ProxierHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// ProxyHealth is the JSON body of /healthz and /livez, the same document
// kube-proxy 1.34 serves. NodeEligible is only set by /healthz.
type ProxyHealth struct {
	LastUpdated  time.Time                     `json:"lastUpdated"`
	CurrentTime  time.Time                     `json:"currentTime"`
	NodeEligible *bool                         `json:"nodeEligible,omitempty"`
	Healthy      bool                          `json:"healthy"`
	Status       map[v1.IPFamily]ProxierHealth `json:"status,omitempty"`
}

// ProxyHealthServer tracks whether the proxy keeps its dataplane in sync
// and serves kube-proxy's /healthz and /livez.
//
// Engines call QueuedUpdate when a handler records a change and Updated
// after every successful sync. The proxy is healthy when:
//   - some engine has completed at least one sync (before that, both
//     endpoints answer 503), and
//   - no engine has had a change queued for HealthTimeout or longer
//     without a successful sync since.
//
// /livez answers 200 when healthy, else 503. /healthz additionally needs
// the node to be eligible: known (see AssumeNodeEligible), not being
// deleted, and not tainted ToBeDeletedByClusterAutoscaler. Each body's
// "healthy" says what its status code says.
//
// A healthy answer reports the current time as lastUpdated (kube-proxy's
// compatibility rule: "recent" means healthy); an unhealthy one reports
// the time of the last successful sync.
//
// It implements proxy.NodeHandler so it can be registered with a node
// source next to the engines; SyncNode does the same directly.
type ProxyHealthServer struct {
	cfg ProxyHealthConfig

	mu                  sync.RWMutex
	lastUpdated         map[v1.IPFamily]time.Time
	oldestPendingQueued map[v1.IPFamily]time.Time
	nodeKnown           bool
	nodeEligible        bool
}

var _ proxy.NodeHandler = (*ProxyHealthServer)(nil)

// NewProxyHealthServer returns a server; nothing listens until Run.
func NewProxyHealthServer(cfg ProxyHealthConfig) *ProxyHealthServer {
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = DefaultHealthTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Listener == nil {
		cfg.Listener = StdListener{}
	}
	return &ProxyHealthServer{
		cfg:                 cfg,
		lastUpdated:         map[v1.IPFamily]time.Time{},
		oldestPendingQueued: map[v1.IPFamily]time.Time{},
	}
}

// QueuedUpdate records that the engine of family has a change it has not
// synced yet. Only the oldest unsynced change counts.
func (hs *ProxyHealthServer) QueuedUpdate(family v1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if _, set := hs.oldestPendingQueued[family]; !set {
		hs.oldestPendingQueued[family] = hs.cfg.Clock.Now()
	}
}

// Updated records a successful sync of the engine of family.
func (hs *ProxyHealthServer) Updated(family v1.IPFamily) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	delete(hs.oldestPendingQueued, family)
	hs.lastUpdated[family] = hs.cfg.Clock.Now()
}

// Health returns the proxy's health, ignoring the node.
func (hs *ProxyHealthServer) Health() ProxyHealth {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	now := hs.cfg.Clock.Now()
	h := ProxyHealth{
		CurrentTime: now,
		Healthy:     len(hs.lastUpdated) > 0,
		Status:      map[v1.IPFamily]ProxierHealth{},
	}
	families := map[v1.IPFamily]bool{}
	for f := range hs.lastUpdated {
		families[f] = true
	}
	for f := range hs.oldestPendingQueued {
		families[f] = true
	}
	for f := range families {
		last := hs.lastUpdated[f]
		if last.After(h.LastUpdated) {
			h.LastUpdated = last
		}
		healthy := true
		if queued, pending := hs.oldestPendingQueued[f]; pending && now.Sub(queued) >= hs.cfg.HealthTimeout {
			healthy = false
			h.Healthy = false
		}
		h.Status[f] = ProxierHealth{LastUpdated: last, Healthy: healthy}
	}
	return h
}

// IsHealthy reports Health().Healthy.
func (hs *ProxyHealthServer) IsHealthy() bool { return hs.Health().Healthy }

// SyncNode records the state of this proxy's node; nil means the node is
// gone (deleted), which makes it ineligible.
func (hs *ProxyHealthServer) SyncNode(node *v1.Node) {
	eligible := node != nil && node.DeletionTimestamp.IsZero()
	if eligible {
		for _, taint := range node.Spec.Taints {
			if taint.Key == ToBeDeletedTaint {
				eligible = false
				break
			}
		}
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.nodeKnown = true
	hs.nodeEligible = eligible
}

// NodeEligible reports whether /healthz may answer 200 as far as the node
// is concerned.
func (hs *ProxyHealthServer) NodeEligible() bool {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	if !hs.nodeKnown {
		return hs.cfg.AssumeNodeEligible
	}
	return hs.nodeEligible
}

// OnNodeAdd implements proxy.NodeHandler.
func (hs *ProxyHealthServer) OnNodeAdd(node *v1.Node) { hs.SyncNode(node) }

// OnNodeUpdate implements proxy.NodeHandler.
func (hs *ProxyHealthServer) OnNodeUpdate(_, node *v1.Node) { hs.SyncNode(node) }

// OnNodeDelete implements proxy.NodeHandler.
func (hs *ProxyHealthServer) OnNodeDelete(*v1.Node) { hs.SyncNode(nil) }

// OnNodeSynced implements proxy.NodeHandler.
func (hs *ProxyHealthServer) OnNodeSynced() {}

// Handler returns the /healthz and /livez handlers, for embedders that
// serve them from their own mux.
func (hs *ProxyHealthServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", hs.serveHealthz)
	mux.HandleFunc("/livez", hs.serveLivez)
	return mux
}

// serveHealthz answers 200 when the proxy is healthy and the node
// eligible; its body's "healthy" is that same verdict (as kube-proxy's:
// a synced proxy on a node being deleted answers 503, healthy false), the
// per-family "status" keeps the proxy's own health.
func (hs *ProxyHealthServer) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	h := hs.Health()
	eligible := hs.NodeEligible()
	h.NodeEligible = &eligible
	h.Healthy = h.Healthy && eligible
	code := hs.write(w, h, h.Healthy)
	hs.cfg.Metrics.IncHealthz(code)
}

func (hs *ProxyHealthServer) serveLivez(w http.ResponseWriter, _ *http.Request) {
	h := hs.Health()
	code := hs.write(w, h, h.Healthy)
	hs.cfg.Metrics.IncLivez(code)
}

func (hs *ProxyHealthServer) write(w http.ResponseWriter, h ProxyHealth, healthy bool) int {
	code := http.StatusServiceUnavailable
	if healthy {
		code = http.StatusOK
		h.LastUpdated = h.CurrentTime
	}
	body, err := json.Marshal(h)
	if err != nil { // cannot happen with these types
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return http.StatusInternalServerError
	}
	setJSONHeaders(w)
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return code
}

// Run listens on Addr and serves /healthz and /livez until ctx ends, then
// shuts the server down and returns nil. It returns an error if it cannot
// listen or the server fails.
func (hs *ProxyHealthServer) Run(ctx context.Context) error {
	ln, err := hs.cfg.Listener.Listen(ctx, hs.cfg.Addr)
	if err != nil {
		return fmt.Errorf("healthcheck: listening for proxy health on %q: %w", hs.cfg.Addr, err)
	}
	return hs.Serve(ctx, ln)
}

// Serve is Run on a listener of the caller's; it closes ln.
func (hs *ProxyHealthServer) Serve(ctx context.Context, ln net.Listener) error {
	srv := newHTTPServer(hs.Handler())
	hs.cfg.Logger.V(3).Info("Serving proxy health", "address", ln.Addr().String())
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) && ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("healthcheck: proxy health server: %w", err)
}
