// Package iptables is the iptables engine: a proxy.Provider that programs
// Kubernetes services into iptables the way kube-proxy's iptables mode
// (release 1.34) does, with the same chain names (KUBE-SERVICES,
// KUBE-SVC-/KUBE-SVL-/KUBE-EXT-/KUBE-FW-/KUBE-SEP-<hash>, ...), so a node
// can move between kube-proxy and this engine in either direction.
//
// A Proxier is built on the engine base (package proxy/engine) from a
// Config (engine.Common plus the iptables mode's fields, every zero value
// documented) and Interfaces, what it drives: IPTables, one IP family's
// iptables through package xtables' Runner (xtables.New is the real one,
// nft or legacy backend; iptablestest.NewFakes the in-memory one, with a
// packet tracer). Its exported methods are the base's: the handlers,
// Sync, Run, DryRun, Cleanup, Close, Stats, RequestFullSync, Config,
// IPFamily. Dual stack is two Proxiers combined with proxy.NewDualStack.
//
// Each sync has three steps:
//   - plan: a pure function of the service ports, their endpoints, the
//     node's labels and the Config, split by concern (plan_clusterip.go,
//     plan_nodeport.go, plan_loadbalancer.go, plan_externalip.go,
//     plan_affinity.go, plan_masquerade.go). Render exposes it.
//   - diff: a full sync renders every chain, then keeps only the chains
//     whose content differs from the kernel's listing (rules compared in
//     a normal form both our rendering and iptables-save reduce to; see
//     chaindiff.go), and deletes the per-service chains no longer wanted
//     (those it wrote before, and those the kernel lists). A restart over
//     a correct ruleset, or a resync of an unchanged one, restores
//     nothing. A full resync (periodic, node-label, engine-chosen or
//     requested) of tables nobody changed since the engine's last write
//     skips iptables-save altogether and diffs against the chain digests
//     it carried through its own restores (for a chain it wrote, a hash of
//     the lines as rendered, so unchanged chains are compared without
//     parsing a rule): iptables-nft proves it with the
//     nftables ruleset generation, legacy with each table's size and
//     entry count and the names of its nat and filter chains read from
//     the kernel, listing anyway every 4th resync (resync.go). So a chain
//     of ours that another writer put back (one that ignores the xtables
//     lock writing back a stale copy of the table: on legacy the kernel
//     takes it whenever its entry count is the one it read) is found and
//     deleted by the next full resync, with the rules around it: on
//     iptables-nft any commit moves the generation; on legacy the chain
//     names differ from ours. What such a copy can still hide until the
//     4th resync is a change that keeps every chain name and the table's
//     size and entry count (rules replaced in place). A partial
//     sync writes only the services that changed.
//   - writer: on iptables-legacy the Runner writes the tables from the
//     process (iptables/xtables: versions, switches, fallbacks). The
//     payload is rendered once, its text and its lines typed side by side
//     (ops.go); the chain compare, the chunker, the digest bookkeeping and
//     the in-process writer read the typed lines
//     (xtables.RestoreInput.Ops), never the text parsed back; the tools
//     read the text. Every
//     full sync asks it to read back what it writes
//     (xtables.Runner.CheckNextRestore), and a read-back that differs, or a
//     refusal after part of a restore was written, fails the sync, so the
//     next one, full, lists and repairs through the tool.
//   - apply: one iptables-restore --noflush call (a full sync that
//     creates more than 5,000 nat chains on iptables-nft, or 56,000 on
//     legacy, is split into several, in order, ending at service
//     boundaries: the tool's cost grows faster than linearly with the
//     chains of one restore; see chunk.go). Every nat chain the
//     payload creates, flushes or deletes is declared in one block ahead
//     of the rules, in descending name order: both iptables-restore
//     backends insert chains into a sorted list, and this order is several
//     times faster at scale (see BENCHMARKS.md). The exception: on a full
//     sync, a service's chains that the kernel already has are declared
//     (flushed) just before that service's rules, which keeps the lookup
//     table iptables-restore fills with declared chain names small for
//     longer. Full syncs read each table once with iptables-save, and
//     create the fixed chains, jump rules and canaries the listings lack
//     in one more restore (-N, -I; iptables -N/-C/-I one by one only when
//     a listing or that restore failed).
//
// DryRun returns the payload a full sync would apply, touching nothing.
//
// Masquerading is always MASQUERADE --random-fully, as kube-proxy v1.37
// writes it (it dropped HasRandomFully; so do the engines:
// xtables.Runner.HasRandomFully is deprecated and no longer asked).
//
// Guarantees:
//   - Sync is synchronous: when it returns nil the tables reflect every
//     object handed to the handlers before the call. Before the tracker is
//     synced it returns proxy.ErrNotSynced and touches nothing.
//   - A partial sync is proportional to what changed, not to the number of
//     services: each service's rules in the shared dispatch chains
//     (KUBE-SERVICES, KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES,
//     KUBE-PROXY-FIREWALL) are added and deleted one by one (-I/-A/-D),
//     since their order carries no meaning; only the tail rule of nat
//     KUBE-SERVICES (to KUBE-NODEPORTS) must stay last, and new rules are
//     inserted ahead of it. A changed service rewrites its KUBE-SVC/SVL/
//     EXT/FW chains and only the KUBE-SEP chains that are new.
//   - The base decides full or partial: full at start, after a failed
//     sync, when the node's labels changed, every FullSyncPeriod (one
//     hour), and at once when the drift check finds a KUBE-PROXY-CANARY
//     chain missing (tables flushed or our chains deleted behind our back;
//     checked every DriftCheckInterval, 2 s); the periodic syncs of Run
//     are partial. The engine itself makes a sync full when the cluster
//     crosses kube-proxy's 1,000-endpoint threshold for terse rules
//     (Result.Full).
//   - A failed apply returns an *engine.SyncError wrapping the Runner's
//     error (an *xtables.RestoreError, or one matching xtables.ErrLockHeld
//     when the xtables lock stayed held past the runner's bounded wait);
//     restore failures are counted in metrics; the tracker's state is
//     kept, the next sync is full, and Run retries with backoff.
//   - Stale UDP conntrack entries are cleaned by the base after a
//     successful sync, in one batch (engine.Common.Conntrack).
//   - Cleanup removes what this engine (or kube-proxy's iptables mode)
//     created and nothing else.
//
// Localhost node ports (Config.LocalhostNodePorts, off in the zero
// Config, on by default in kube-proxy and in the reference binary) are
// served as kube-proxy serves them: route_localnet set at each full sync
// through Interfaces.Sysctl, KUBE-FIREWALL's "block incoming localnet
// connections" rule, and the node-port tail rule no longer leaving out
// 127.0.0.0/8.
//
// Known differences from kube-proxy: the conntrack-INVALID drop rule in
// KUBE-FORWARD is always written, and localhost node-port packets are not
// counted (no nfacct counters); KUBE-FIREWALL and its jump rules are
// created only when localhost node ports are served (kube-proxy creates
// the chain and the jumps, empty, in every IPv4 and IPv6 full sync; the
// kubelet creates them too). Above 1,000 endpoints the per-endpoint
// comments are left out, as kube-proxy does.
package iptables
