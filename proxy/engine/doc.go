// Package engine is the base every svcproxy engine is built on, and the
// way to build an engine of your own on package changetracker.
//
// An engine supplies only Hooks.Apply: "plan + diff + apply for this
// update". Base owns everything around it, once for every engine:
//
//   - the change tracker, held and never embedded, so no tracker method is
//     an engine method; the Provider handlers only record;
//   - the synced check: nothing touches the node before both initial lists
//     (Services, EndpointSlices) are reported synced (proxy.ErrNotSynced);
//   - the bounded-frequency loop (package proxy/runner): a sync on change,
//     no more often than MinSyncPeriod, at least every SyncPeriod, and
//     retries with exponential backoff after failures;
//   - the full/partial decision: full at start, after a failure, after a
//     node label change, every FullSyncPeriod (one hour) and at once when
//     the engine's drift check (Hooks.Drifted, run every
//     DriftCheckInterval) finds the node changed behind our back; every
//     other sync, the periodic ones included, is partial;
//   - whether a full sync may trust the engine's last write and skip
//     listing the node (Request.Unchanged): never at start, after a
//     failure, drift, a dry run or a cleanup; otherwise as the engine's
//     Hooks.Unchanged says (nobody changed the node since its last write);
//   - kube-proxy's sync metrics (durations, last queued and last synced
//     timestamps, service and endpoint changes, pending gauges, conntrack
//     reconciliation), the proxy health updater and the service health
//     servers;
//   - stale-UDP conntrack cleanup (StaleUDPFilters, Common.Conntrack),
//     kept across failed syncs until one succeeds;
//   - the shared public surface: Sync, Run, DryRun, Cleanup, Close, Stats,
//     RequestFullSync, Config, IPFamily, and Common.OnSync to observe each
//     sync's outcome.
//
// Every engine's Config embeds Common as its field Common; the Configs of
// the engines that write netfilter rules (iptables, nftables, ipvs) embed
// Netfilter too (masquerading, the local-traffic detector, node-port
// addresses). Every engine has the constructor NewProxier(cfg Config, ifs
// Interfaces) (*Proxier, error), where Interfaces bundles what it drives
// (fakes in tests).
//
// Guarantees: Apply, DryRun, Drifted, Unchanged and Cleanup never run
// concurrently;
// a failed Apply never loses tracker state (the next sync is full and
// recomputes everything); Run returns only when its context ends.
package engine
