// Package nftables is kube-proxy's nftables mode as a library: a Proxier on
// the shared engine base (package proxy/engine) that programs the
// "kube-proxy" table of the ip or ip6 family through sigs.k8s.io/knftables.
//
// The table has upstream kube-proxy's layout and names (v1.34): base chains
// filter-prerouting-pre-dnat and filter-output-pre-dnat (the firewall
// check, before DNAT), filter-input, filter-forward and filter-output (the
// endpoint and cluster-IP checks, at filter priority, after DNAT),
// nat-prerouting, nat-output and nat-postrouting;
// dispatch through the verdict maps service-ips (cluster, external and
// load-balancer IPs) and service-nodeports; no-endpoint-services and
// no-endpoint-nodeports to reject (no endpoints) or drop (a Local policy
// with no local endpoint); firewall-ips for loadBalancerSourceRanges; the
// sets cluster-ips and nodeport-ips; per service port the chains
// service-HASH-ns/name/proto/port (Cluster policy), local-… (Local
// policy), external-… and firewall-…; per endpoint endpoint-HASH-…__ip/port
// chains, and affinity-… dynamic sets with timeouts for ClientIP
// affinity. A node therefore moves from upstream kube-proxy to this engine
// and back without a traffic gap, and either's cleanup removes the other's
// table.
//
// Two things differ from upstream's table. The nodeport-ips set exists
// (empty) when node ports match every local address, where upstream
// deletes it. And one rule shape: a service chain picks its
// endpoint with one rule per endpoint ("numgen random mod N-i 0 goto
// endpoint-…", the last a plain goto, each endpoint taken with probability
// 1/N as in kube-proxy's iptables mode) instead of upstream's one
// "numgen random mod N vmap { 0 : goto …, … }". Each inline vmap is an
// anonymous set in the kernel, which names a new one by scanning every set
// of the table and which nft reads back before every transaction: with one
// per service, loading 40,000 chains took 35 s of kernel time against
// 1.5 s without (BENCHMARKS.md).
//
// Beyond upstream, for large clusters:
//   - a partial sync never lists the kernel: it diffs the changed services
//     against what the last successful transactions committed (kept in
//     memory) and writes only the chains whose content changed and the map
//     elements added or removed;
//   - a partial sync's transaction, and each chunk of a full sync's,
//     goes to the kernel as one netlink batch
//     (Interfaces.Netlink, set by NewInterfaces), not through nft: nft
//     (1.0.6) reads every chain, set and map of the table back before any
//     transaction that adds a rule, O(table) however small the change.
//     The encoder writes the expressions nft generates for the planner's
//     per-service rule forms, chains, affinity sets and elements (so
//     "nft list table" shows the same table, comments and content hashes
//     included), firewall rules with several source ranges as the
//     anonymous interval sets nft makes of them; a change set holding
//     anything else (the table, its sets and maps, base chains and the
//     fixed chains' rules; source ranges that overlap or touch, which nft
//     merges, or that reach the last address) goes through nft whole, as
//     the dry run always does. The kernel
//     applies a batch atomically; the engine records it only once the
//     kernel acknowledged it, and a refused batch (*BatchError) fails the
//     sync, so the next one is full. What remains O(table) is the
//     kernel's own check of the table at commit (loop and hook
//     validation of every chain reachable from the base chains), which
//     any transaction adding a jump, goto or verdict element pays
//     (BENCHMARKS.md);
//   - a full sync lists the table once and writes only the chains, sets
//     and elements that differ: the first rule of every chain the engine
//     writes carries a hash of the chain's content in its comment. At
//     start, after a failure, detected drift, Cleanup, RequestFullSync
//     and a periodic resync that lists, every chain's hash and rule count
//     are read (Interfaces.Comments: one netlink rule dump per chain; a
//     rule added or deleted by hand below the first changes the count),
//     so a restart over a correct table writes nothing for unchanged
//     services and a table left by upstream kube-proxy is adopted in one
//     transaction per chunk; node-label changes list only object names
//     and elements and trust the recorded hashes of chains that still
//     exist; and any of these (RequestFullSync included) lists nothing at all
//     when the ruleset generation id (Interfaces.Generation) is still the
//     one the engine's last transaction left: no transaction of anyone
//     else has committed in the network namespace since (genid.go);
//   - a full sync that writes many services (a cold start) is split into
//     transactions of about Config.MaxTransactionOps operations, whole
//     services each, so traffic to the first services flows before the
//     last are written; into an empty table, or one flushed by hand, the
//     fixed part (table, sets, maps, base and fixed chains) goes first,
//     alone, through nft, and every chunk of services after it over
//     netlink;
//   - drift (the table deleted or flushed behind the engine's back) is
//     found by listing one two-rule chain every DriftCheckInterval, and
//     repaired by a full sync.
//
// Removed chains are flushed at once and deleted by a later sync (about a
// second later: kernels before 6.2 notice late that a chain is no longer
// referenced), as upstream does.
//
// The engine needs Linux (nft ≥ 1.0.1, kernel ≥ 5.13 as upstream); on other
// systems the package is empty. Package nftablestest has the fake (over
// knftables.Fake) and a packet tracer for tests.
package nftables
