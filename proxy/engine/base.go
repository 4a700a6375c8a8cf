package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/changetracker"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/runner"
)

// ErrClosed is returned by Sync and DryRun after Close.
var ErrClosed = errors.New("proxier closed")

// ErrNoDryRun is returned by DryRun for an engine that has no dry run.
var ErrNoDryRun = errors.New("engine has no dry run")

// Hooks is what an engine plugs into the base: plan + diff + apply for one
// update, and the few engine-specific entry points. Only Apply is required.
type Hooks struct {
	// Name names the engine in logs and errors ("iptables").
	Name string
	// Apply plans the dataplane for req.Update, diffs it against what was
	// applied last (on a full sync, against what the node reports) and
	// applies the difference. It is never called concurrently with itself
	// or with the other hooks. An error keeps the tracker's state: the next
	// sync is full.
	Apply func(ctx context.Context, req *Request) (Result, error)
	// DryRun renders what Apply would do for req (a full sync), as text,
	// without changing the node or the engine's record of what it applied.
	DryRun func(ctx context.Context, req *Request) (string, error)
	// Drifted, if set, cheaply checks that the node still holds what the
	// last sync wrote (a canary chain, say). Run calls it every
	// Common.DriftCheckInterval after the first successful full sync, on
	// the goroutine that called Run (so in Run's network namespace), never
	// concurrently with the other hooks; true makes the next sync full and
	// starts it at once.
	Drifted func(ctx context.Context) (bool, error)
	// Unchanged, if set, reports whether the node still holds exactly what
	// this engine's last write left: nobody changed it since (a generation
	// id that moved only by the engine's own commits, a table digest
	// recorded after its last write). Only Request.Unchanged calls it, on
	// a full sync whose reason casts no doubt on the node, from within
	// Apply (so never concurrently with the other hooks). Any doubt is
	// false: the engine then lists the node as on any full sync.
	Unchanged func(req *Request) bool
	// Cleanup removes everything this engine's mode may have left on the
	// node, ours or an earlier run's; nil means there is nothing to clean.
	Cleanup func(ctx context.Context) error
	// Close releases what the engine holds (sockets, handles); may be nil.
	Close func() error
	// MakeServicePort and MakeEndpoint let the engine wrap the tracker's
	// values with its own data (nil keeps the base types).
	MakeServicePort changetracker.MakeServicePortFunc
	MakeEndpoint    changetracker.MakeEndpointFunc
}

// Reason says why a sync is full.
type Reason string

// The reasons for a full sync ("" on a partial one).
const (
	ReasonInitial   Reason = "initial"   // first sync of this proxier
	ReasonFailure   Reason = "failure"   // the previous sync failed
	ReasonNode      Reason = "node"      // this node's topology labels changed
	ReasonPeriodic  Reason = "periodic"  // Common.FullSyncPeriod passed
	ReasonDrift     Reason = "drift"     // Hooks.Drifted found the node changed behind our back
	ReasonDryRun    Reason = "dry-run"   // a dry run consumed changes; the next sync rewrites all
	ReasonCleanup   Reason = "cleanup"   // Cleanup removed our state
	ReasonRequested Reason = "requested" // RequestFullSync
	ReasonEngine    Reason = "engine"    // the engine chose a full sync (Result.Full)
	ReasonNone      Reason = ""          // a partial sync
)

// Request is one sync handed to Hooks.Apply or Hooks.DryRun.
type Request struct {
	// Update is the tracker's current state and what changed since the
	// last sync (read-only; valid until the hook returns).
	Update *changetracker.Update
	// Full asks for every object to be recomputed and compared with the
	// node (Reason says why). Otherwise only Update.ChangedServices need
	// to be written.
	Full   bool
	Reason Reason
	// Now is when the sync started (from Common.Clock).
	Now time.Time

	unchanged func(req *Request) bool // Hooks.Unchanged
}

// Unchanged reports whether Apply may trust that the node is as the
// engine's last write left it, and diff a full sync against its own record
// instead of listing the node: only for a full sync whose Reason casts no
// doubt on the node (ReasonPeriodic, ReasonNode, ReasonEngine,
// ReasonRequested; never the first sync, one after a failure, drift, a dry
// run or a cleanup), and only if Hooks.Unchanged says so. Apply asks where
// it would list (each call asks the hook again).
func (r *Request) Unchanged() bool {
	switch r.Reason {
	case ReasonPeriodic, ReasonNode, ReasonEngine, ReasonRequested:
		return r.unchanged != nil && r.unchanged(r)
	}
	return false
}

// Result is what Hooks.Apply reports of one sync.
type Result struct {
	// Full: the engine did a full sync although a partial one was asked
	// (for example, a switch of rule style that rewrites every service).
	Full bool
	// Writes counts the objects the sync wrote to the node (rule lines,
	// IPVS and ipset operations, nft commands, HNS calls); 0 means the node
	// already matched.
	Writes int
	// Conntrack adds stale UDP conntrack filters to those the base derives
	// from the update (StaleUDPFilters).
	Conntrack []conntrack.Filter
	// RequeueAfter, when positive, asks Run for another sync within this
	// time even if nothing changes (graceful termination, say).
	RequeueAfter time.Duration
}

// SyncOutcome describes one sync attempt (Common.OnSync, Stats).
type SyncOutcome struct {
	Engine   string
	Family   v1.IPFamily
	Start    time.Time
	Duration time.Duration
	Full     bool
	Reason   Reason
	// Services is the number of service ports held; Changed the number of
	// services this sync's update changed.
	Services int
	Changed  int
	// Result is what the engine reported (zero on failure).
	Result Result
	// Err is the sync's error (a *SyncError), nil on success.
	Err error
}

// Stats is what Base.Stats reports.
type Stats struct {
	// Last is the last sync attempt; LastSuccess when the last successful
	// one started (zero: none yet).
	Last        SyncOutcome
	LastSuccess time.Time
	// Counters since the proxier was built.
	Syncs, FullSyncs, Failures uint64
	// ConsecutiveFailures is the number of failed syncs since the last
	// success.
	ConsecutiveFailures uint64
	// Skipped counts invalid ports, fields and endpoint addresses the
	// tracker logged and skipped (bad objects in the cluster).
	Skipped uint64
	// OtherFamily is how many services are skipped now because every
	// cluster IP they have is of the other IP family (each is logged
	// once, at V(2); see changetracker.Tracker.OtherFamily). Expected for
	// the single-stack services of a dual-stack cluster on a single-stack
	// Provider; a dual-stack Provider reports 0, as each such service is
	// served by its other half.
	OtherFamily int
}

// SyncError is the error of a failed sync: the engine's error (errors.As
// finds e.g. an *xtables.RestoreError) with what was being done.
type SyncError struct {
	Engine string
	Family v1.IPFamily
	Full   bool
	Err    error
}

func (e *SyncError) Error() string {
	kind := "partial"
	if e.Full {
		kind = "full"
	}
	return fmt.Sprintf("%s %s: %s sync failed: %v", e.Engine, e.Family, kind, e.Err)
}

func (e *SyncError) Unwrap() error { return e.Err }

// Base is the engine base: it owns the change tracker (held, not
// embedded), the handlers, the synced check, the bounded-frequency loop,
// the full/partial decision, drift checks, metrics, health and stale-UDP
// conntrack cleanup. Engines embed a *Base and supply Hooks; the exported
// methods of Base are the whole public surface every engine shares.
//
// Handler methods are safe for concurrent use and only record. Sync, Run,
// DryRun, Cleanup and Close may be called from any goroutine; syncs are
// serialized.
type Base struct {
	cfg     Common
	hooks   Hooks
	log     logr.Logger
	tracker *changetracker.Tracker
	loop    *runner.Runner
	closed  atomic.Bool
	// wanted: a change, a request or a requeue asked for a sync that has
	// not started yet; driftDue: the drift ticker asked for a check.
	wanted   atomic.Bool
	driftDue atomic.Bool

	mu         sync.Mutex // serializes syncs and the hooks; guards below
	needFull   bool
	fullReason Reason
	lastFull   time.Time
	// lastAttempt is when the last sync started, failed or not.
	lastAttempt time.Time
	pendingCT   []conntrack.Filter
	stats       Stats
	requeue     clock.Timer
	runCtx      context.Context
}

// New returns a Base for cfg (defaults applied) and hooks. Nothing touches
// the node before the first Sync after both initial lists are synced.
func New(cfg Common, hooks Hooks) (*Base, error) {
	if hooks.Apply == nil {
		return nil, errors.New("engine: Hooks.Apply is required")
	}
	if hooks.Name == "" {
		hooks.Name = "engine"
	}
	cfg, err := cfg.WithDefaults(cfg.IPFamily)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hooks.Name, err)
	}
	b := &Base{
		cfg:        cfg,
		hooks:      hooks,
		log:        cfg.Logger.WithValues("ipFamily", cfg.IPFamily),
		needFull:   true,
		fullReason: ReasonInitial,
	}
	retry := cfg.MinSyncPeriod
	if retry < time.Second {
		retry = time.Second
	}
	b.loop = runner.New(hooks.Name+"-"+string(cfg.IPFamily), b.runOnce, runner.Config{
		MinInterval:      cfg.MinSyncPeriod,
		MaxInterval:      cfg.SyncPeriod,
		RetryInterval:    retry,
		MaxRetryInterval: cfg.SyncPeriod,
		Clock:            cfg.Clock,
		Logger:           b.log,
	})
	b.tracker = changetracker.New(changetracker.Config{
		IPFamily:         cfg.IPFamily,
		NodeName:         cfg.NodeName,
		ServiceProxyName: cfg.ServiceProxyName,
		Filter:           cfg.EndpointFilter,
		MakeServicePort:  hooks.MakeServicePort,
		MakeEndpoint:     hooks.MakeEndpoint,
		Logger:           b.log,
		OnChange:         b.onChange,
	})
	return b, nil
}

// Config returns the Common configuration in force (defaults applied).
func (b *Base) Config() Common { return b.cfg }

// IPFamily returns the proxier's IP family (proxy.NewDualStack checks it).
func (b *Base) IPFamily() v1.IPFamily { return b.cfg.IPFamily }

func (b *Base) onChange(kind changetracker.Change) {
	m := b.cfg.Metrics
	switch kind {
	case changetracker.ServiceChange:
		m.IncServiceChanges()
	case changetracker.EndpointsChange:
		m.IncEndpointChanges()
	}
	b.setPendingMetrics()
	if hs := b.cfg.HealthServer; hs != nil {
		hs.QueuedUpdate(b.cfg.IPFamily)
	}
	m.SetLastQueued(b.cfg.IPFamily, b.cfg.Clock.Now())
	b.trigger()
}

// trigger asks the loop for a sync.
func (b *Base) trigger() {
	b.wanted.Store(true)
	b.loop.Trigger()
}

func (b *Base) setPendingMetrics() {
	if b.cfg.Metrics == nil {
		return
	}
	s, e := b.tracker.Pending()
	b.cfg.Metrics.SetServiceChangesPending(s)
	b.cfg.Metrics.SetEndpointChangesPending(e)
}

// OnServiceAdd records a new Service.
func (b *Base) OnServiceAdd(service *v1.Service) { b.tracker.OnServiceAdd(service) }

// OnServiceUpdate records a changed Service.
func (b *Base) OnServiceUpdate(oldService, service *v1.Service) {
	b.tracker.OnServiceUpdate(oldService, service)
}

// OnServiceDelete records a deleted Service.
func (b *Base) OnServiceDelete(service *v1.Service) { b.tracker.OnServiceDelete(service) }

// OnServiceSynced records that the initial Service list was delivered.
func (b *Base) OnServiceSynced() { b.tracker.OnServiceSynced() }

// OnEndpointSliceAdd records a new EndpointSlice.
func (b *Base) OnEndpointSliceAdd(slice *discovery.EndpointSlice) {
	b.tracker.OnEndpointSliceAdd(slice)
}

// OnEndpointSliceUpdate records a changed EndpointSlice.
func (b *Base) OnEndpointSliceUpdate(oldSlice, slice *discovery.EndpointSlice) {
	b.tracker.OnEndpointSliceUpdate(oldSlice, slice)
}

// OnEndpointSliceDelete records a deleted EndpointSlice.
func (b *Base) OnEndpointSliceDelete(slice *discovery.EndpointSlice) {
	b.tracker.OnEndpointSliceDelete(slice)
}

// OnEndpointSlicesSynced records that the initial EndpointSlice list was delivered.
func (b *Base) OnEndpointSlicesSynced() { b.tracker.OnEndpointSlicesSynced() }

// OnNodeAdd records this node's labels (other nodes are ignored).
func (b *Base) OnNodeAdd(node *v1.Node) { b.tracker.OnNodeAdd(node) }

// OnNodeUpdate records this node's labels.
func (b *Base) OnNodeUpdate(oldNode, node *v1.Node) { b.tracker.OnNodeUpdate(oldNode, node) }

// OnNodeDelete forgets this node's labels.
func (b *Base) OnNodeDelete(node *v1.Node) { b.tracker.OnNodeDelete(node) }

// OnNodeSynced does nothing: syncs never wait for the node.
func (b *Base) OnNodeSynced() { b.tracker.OnNodeSynced() }

// Run syncs whenever something changed (at most once per MinSyncPeriod),
// at least every SyncPeriod (partially: only what changed is written), in
// full every FullSyncPeriod and at once when the engine's drift check
// fails, and retries failed syncs with exponential backoff (from
// max(MinSyncPeriod, 1s) up to SyncPeriod), until ctx ends. It returns nil
// then; sync errors are reported through Common.OnSync, Stats, metrics and
// the log, never by ending Run.
func (b *Base) Run(ctx context.Context) error {
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.runCtx = nil
		if b.requeue != nil {
			b.requeue.Stop()
			b.requeue = nil
		}
		b.mu.Unlock()
	}()
	if b.hooks.Drifted != nil && b.cfg.DriftCheckInterval > 0 {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			b.watchDrift(ctx)
		}()
	}
	b.trigger()
	return b.loop.Run(ctx)
}

func (b *Base) runOnce(ctx context.Context) error {
	if b.driftDue.Swap(false) {
		// A drift check runs here, on Run's goroutine (inside the network
		// namespace Run was called in), never on a goroutine of its own.
		if drifted := b.checkDrift(ctx); !drifted && !b.syncDue() {
			// Only the check was due: it must not hold back a change
			// arriving right after it by MinSyncPeriod.
			return runner.ErrNotRun
		}
	}
	err := b.Sync(ctx)
	if errors.Is(err, proxy.ErrNotSynced) || errors.Is(err, ErrClosed) {
		// Not a run: the handlers trigger again once synced, and that
		// first sync must not wait out MinSyncPeriod behind this attempt.
		return runner.ErrNotRun
	}
	return err
}

// syncDue reports whether a loop run must sync: something asked for one,
// the last sync failed, or SyncPeriod has passed since the last one.
func (b *Base) syncDue() bool {
	if b.wanted.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats.ConsecutiveFailures > 0 || b.cfg.Clock.Since(b.lastAttempt) >= b.cfg.SyncPeriod
}

// watchDrift marks a drift check due every DriftCheckInterval and wakes
// the loop, which runs it.
func (b *Base) watchDrift(ctx context.Context) {
	t := b.cfg.Clock.NewTicker(b.cfg.DriftCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if b.closed.Load() {
			return
		}
		b.driftDue.Store(true)
		b.loop.Trigger()
	}
}

// checkDrift asks the engine whether the node still holds what it wrote;
// on drift the next sync is full.
func (b *Base) checkDrift(ctx context.Context) bool {
	b.mu.Lock()
	if b.lastFull.IsZero() || b.needFull || b.closed.Load() {
		b.mu.Unlock()
		return false // nothing written yet, or a full sync is due anyway
	}
	drifted, err := b.hooks.Drifted(ctx)
	if drifted {
		b.needFull, b.fullReason = true, ReasonDrift
	}
	b.mu.Unlock()
	switch {
	case err != nil:
		b.log.Error(err, "Checking the node for drift")
	case drifted:
		b.log.Info("The node no longer holds what the last sync wrote; syncing in full", "engine", b.hooks.Name)
	}
	return drifted
}

// RequestFullSync makes the next sync full (it does not start one; Run's
// loop is triggered).
func (b *Base) RequestFullSync() {
	b.mu.Lock()
	if !b.needFull {
		b.needFull, b.fullReason = true, ReasonRequested
	}
	b.mu.Unlock()
	b.trigger()
}

// Sync programs the node now: when it returns nil, the node reflects every
// object handed to the handlers before the call (see proxy.Provider).
// Before both initial lists are synced it returns proxy.ErrNotSynced and
// touches nothing. A sync is full the first time, after a failure, after a
// node label change, every FullSyncPeriod and after detected drift; else
// only what changed is written. A failure returns a *SyncError, keeps the
// tracker's state and makes the next sync full.
func (b *Base) Sync(ctx context.Context) error {
	if b.closed.Load() {
		return ErrClosed
	}
	if !b.tracker.Synced() {
		return proxy.ErrNotSynced
	}
	b.mu.Lock()
	out := b.syncLocked(ctx)
	b.mu.Unlock()
	if b.cfg.OnSync != nil {
		b.cfg.OnSync(out)
	}
	return out.Err
}

func (b *Base) syncLocked(ctx context.Context) SyncOutcome {
	clk, m, fam := b.cfg.Clock, b.cfg.Metrics, b.cfg.IPFamily
	start := clk.Now()
	b.wanted.Store(false)
	b.lastAttempt = start
	u := b.tracker.Update()
	b.setPendingMetrics()
	b.pendingCT = StaleUDPFilters(&u, b.pendingCT)
	req := Request{Update: &u, Now: start, unchanged: b.hooks.Unchanged}
	req.Full, req.Reason = b.decideFull(&u, start)

	res, err := b.hooks.Apply(ctx, &req)
	out := SyncOutcome{
		Engine: b.hooks.Name, Family: fam, Start: start,
		Full: req.Full || res.Full, Reason: req.Reason,
		Services: len(u.Services), Changed: len(u.ChangedServices),
	}
	if res.Full && !req.Full {
		out.Reason = ReasonEngine
	}
	b.stats.Syncs++
	if err != nil {
		b.needFull, b.fullReason = true, ReasonFailure
		out.Err = &SyncError{Engine: b.hooks.Name, Family: fam, Full: out.Full, Err: err}
		out.Duration = clk.Since(start)
		b.stats.Failures++
		b.stats.ConsecutiveFailures++
		b.stats.Last = out
		b.stats.Skipped, b.stats.OtherFamily = b.tracker.Skipped(), b.tracker.OtherFamily()
		return out
	}
	out.Result = res
	b.needFull, b.fullReason = false, ReasonNone
	if out.Full {
		b.lastFull = start
		b.stats.FullSyncs++
	}
	b.afterSync(&u, &out, res)
	now := clk.Now()
	for _, times := range u.EndpointsResult.LastChangeTriggerTimes {
		for _, t := range times {
			m.ObserveNetworkProgramming(fam, now.Sub(t))
		}
	}
	out.Duration = clk.Since(start)
	m.ObserveSync(fam, out.Duration)
	if out.Full {
		m.ObserveFullSync(fam, out.Duration)
	} else {
		m.ObservePartialSync(fam, out.Duration)
	}
	m.SetLastSync(fam, clk.Now())
	b.stats.ConsecutiveFailures = 0
	b.stats.Last = out
	b.stats.LastSuccess = start
	b.stats.Skipped, b.stats.OtherFamily = b.tracker.Skipped(), b.tracker.OtherFamily()
	if v := b.log.V(2); v.Enabled() { // not boxing the values on every sync when off
		v.Info("Synced", "engine", b.hooks.Name, "full", out.Full, "reason", out.Reason,
			"services", out.Services, "changed", out.Changed, "writes", res.Writes, "elapsed", out.Duration)
	}
	b.scheduleRequeue(res.RequeueAfter)
	return out
}

func (b *Base) decideFull(u *changetracker.Update, now time.Time) (bool, Reason) {
	switch {
	case b.needFull:
		return true, b.fullReason
	case u.NodeChanged:
		return true, ReasonNode
	case b.cfg.FullSyncPeriod > 0 && now.Sub(b.lastFull) >= b.cfg.FullSyncPeriod:
		return true, ReasonPeriodic
	}
	return false, ReasonNone
}

// afterSync updates the health servers and deletes stale UDP conntrack
// entries, now that the dataplane no longer sends traffic to them.
func (b *Base) afterSync(u *changetracker.Update, out *SyncOutcome, res Result) {
	if s := b.cfg.ServiceHealthServer; s != nil && (out.Full || len(u.ChangedServices) > 0) {
		if err := s.SyncServices(u.Services.HealthCheckNodePorts()); err != nil {
			b.log.Error(err, "Syncing health-check node ports")
		}
		if err := s.SyncEndpoints(u.Endpoints.LocalReadyEndpoints()); err != nil {
			b.log.Error(err, "Syncing health-check endpoint counts")
		}
	}
	if hs := b.cfg.HealthServer; hs != nil {
		hs.Updated(b.cfg.IPFamily)
	}
	filters := append(b.pendingCT, res.Conntrack...)
	b.pendingCT = b.pendingCT[:0]
	if ct := b.cfg.Conntrack; ct != nil && len(filters) > 0 {
		start := b.cfg.Clock.Now()
		n, err := ct.DeleteUDP(b.cfg.IPFamily == v1.IPv6Protocol, filters)
		b.cfg.Metrics.ObserveConntrackReconcile(b.cfg.IPFamily, b.cfg.Clock.Since(start), int(n))
		if err != nil {
			// Not retried: the entries time out on their own (UDP: 30s/120s).
			b.log.Error(err, "Deleting stale UDP conntrack entries", "filters", len(filters))
		} else {
			b.log.V(4).Info("Deleted stale UDP conntrack entries", "filters", len(filters), "entries", n)
		}
	}
}

// scheduleRequeue triggers the loop after d (only while Run runs).
func (b *Base) scheduleRequeue(d time.Duration) {
	if b.requeue != nil {
		b.requeue.Stop()
		b.requeue = nil
	}
	if d <= 0 || b.runCtx == nil {
		return
	}
	t := b.cfg.Clock.NewTimer(d)
	b.requeue = t
	ctx := b.runCtx
	go func() {
		select {
		case <-t.C():
			b.trigger()
		case <-ctx.Done():
		}
	}()
}

// DryRun returns, as text, what a full sync would do now, without changing
// the node (the engine's Hooks.DryRun). It applies the tracker's pending
// changes to its maps, so the next Sync is full.
func (b *Base) DryRun(ctx context.Context) (string, error) {
	if b.closed.Load() {
		return "", ErrClosed
	}
	if b.hooks.DryRun == nil {
		return "", fmt.Errorf("%s: %w", b.hooks.Name, ErrNoDryRun)
	}
	if !b.tracker.Synced() {
		return "", proxy.ErrNotSynced
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.tracker.Update()
	b.setPendingMetrics()
	b.pendingCT = StaleUDPFilters(&u, b.pendingCT)
	if !b.needFull {
		b.needFull, b.fullReason = true, ReasonDryRun
	}
	return b.hooks.DryRun(ctx, &Request{Update: &u, Full: true, Reason: ReasonDryRun, Now: b.cfg.Clock.Now()})
}

// Cleanup removes everything this engine's mode may have left on the node
// (rules, virtual servers, sets, addresses), ours or an earlier run's, and
// makes the next sync full. It does not need the initial lists synced, and
// works after Close too (stop serving, then clean up).
func (b *Base) Cleanup(ctx context.Context) error {
	if b.hooks.Cleanup == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.needFull, b.fullReason = true, ReasonCleanup
	return b.hooks.Cleanup(ctx)
}

// Close releases what the engine holds; afterwards Sync and DryRun return
// ErrClosed and Run's loop stops syncing. What was written
// to the node stays (Cleanup removes it). Close is idempotent.
func (b *Base) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.requeue != nil {
		b.requeue.Stop()
		b.requeue = nil
	}
	if b.hooks.Close != nil {
		return b.hooks.Close()
	}
	return nil
}

// Stats returns what the syncs so far did.
func (b *Base) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}
