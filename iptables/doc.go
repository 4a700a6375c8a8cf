// Package iptables is the iptables engine: a proxy.Provider that programs
// Kubernetes services into iptables the way kube-proxy's iptables mode
// (release 1.34) does, with the same chain names (KUBE-SERVICES,
// KUBE-SVC-/KUBE-SVL-/KUBE-EXT-/KUBE-FW-/KUBE-SEP-<hash>, ...), so a node
// can move between kube-proxy and this engine in either direction.
//
// A Proxier is built from a Config (every zero value documented) and a
// Runner, the narrow interface to one IP family's iptables: New returns the
// real one (iptables-restore / iptables-save, nft or legacy backend), and
// iptablestest.Fake an in-memory one with a packet tracer. Dual stack is two
// Proxiers combined with proxy.NewDualStack.
//
// Each sync has three steps:
//   - plan: a pure function of the service ports, their endpoints, the
//     node's labels and the Config, split by concern (plan_clusterip.go,
//     plan_nodeport.go, plan_loadbalancer.go, plan_externalip.go,
//     plan_affinity.go, plan_masquerade.go). Render exposes it.
//   - diff: a full sync writes every chain and deletes the per-service
//     chains no longer wanted (those it wrote before, and those the kernel
//     lists); a partial sync writes only the services that changed.
//   - apply: one iptables-restore --noflush call. Every nat chain the
//     payload creates, flushes or deletes is declared in one block ahead
//     of the rules, in descending name order: both iptables-restore
//     backends insert chains into a sorted list, and this order is several
//     times faster at scale (see BENCHMARKS.md). The exception: on a full
//     sync, a service's chains that the kernel already has are declared
//     (flushed) just before that service's rules, which keeps the lookup
//     table iptables-restore fills with declared chain names small for
//     longer. Full syncs read each table once with iptables-save, and run
//     iptables -N/-C/-I only for the fixed chains, jump rules and canaries
//     the listing lacks.
//
// Plan returns the payload a full sync would apply (the dry run).
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
//   - Full syncs happen first, after a failed sync, every SyncPeriod, when
//     the node's labels changed, and when the KUBE-PROXY-CANARY chain was
//     found missing (tables flushed behind our back).
//   - A failed apply returns a *SyncError (wrapping the Runner's error,
//     e.g. a *RestoreError), is counted in metrics, keeps the tracker's
//     state, and makes the next sync a full one. Run retries it.
//   - Stale UDP conntrack entries are cleaned through the ConntrackCleaner
//     after a successful sync, in one batch.
//   - Cleanup removes what this engine (or kube-proxy's iptables mode)
//     created and nothing else.
//
// Known differences from kube-proxy: localhost node ports are not served
// (route_localnet is not set; the node-port tail rule excludes
// 127.0.0.0/8); the conntrack-INVALID drop rule in KUBE-FORWARD is always
// written (no nfacct counter); full syncs happen every SyncPeriod (kube-
// proxy 1.28+ does partial syncs then and a full one hourly). Above 1,000
// endpoints the per-endpoint comments are left out, as kube-proxy does.
package iptables
