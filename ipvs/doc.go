// Package ipvs is the IPVS engine of svcproxy: kube-proxy's ipvs mode as a
// library. A Proxier (a proxy.Provider) turns Services and EndpointSlices
// into kernel state:
//
//   - one IPVS virtual server per service address, port and protocol: the
//     cluster IP, every node-port address, every external IP and every
//     load-balancer ingress IP; its real servers are the endpoints chosen by
//     proxy.CategorizeEndpoints (traffic policies, topology, terminating
//     fallback), all in masquerade mode with weight 1;
//   - the service addresses bound to the dummy link kube-ipvs0 (created if
//     missing, never brought up, never used for routing), so the kernel sees
//     them as local and hands their packets to IPVS;
//   - kube-proxy's ipsets (KUBE-CLUSTER-IP, KUBE-LOOP-BACK,
//     KUBE-NODE-PORT-TCP, KUBE-LOAD-BALANCER, KUBE-LOAD-BALANCER-FW,
//     KUBE-LOAD-BALANCER-SOURCE-CIDR, KUBE-EXTERNAL-IP, ...; "KUBE-6-..." for
//     IPv6) and a fixed iptables ruleset over them (KUBE-SERVICES,
//     KUBE-POSTROUTING, KUBE-MARK-MASQ, KUBE-NODE-PORT, KUBE-LOAD-BALANCER,
//     KUBE-FORWARD, KUBE-PROXY-FIREWALL, KUBE-SOURCE-RANGES-FIREWALL,
//     KUBE-IPVS-FILTER) for masquerading, hairpin, source ranges and
//     rejecting unused ports of service addresses. The ruleset depends only
//     on the Config: service changes touch ipsets, never iptables. It
//     masquerades with MASQUERADE --random-fully always, as kube-proxy
//     v1.37 (xtables.Runner.HasRandomFully is no longer asked);
//   - the sysctls IPVS needs (net/ipv4/vs/conntrack=1, expire_nodest_conn=1,
//     expire_quiescent_template=1, ip_forward; conn_reuse_mode when
//     configured; arp_ignore=1 and arp_announce=2 with StrictARP) and the
//     IPVS connection timeouts.
//
// # Scheduling and affinity
//
// Config.Scheduler (default rr; any of AllSchedulers) applies to every
// service; a Service picks its own with the annotation
//
//	ipvs.svcproxy.io/scheduler: wlc
//
// (an unknown value is logged and the default used). sessionAffinity
// ClientIP becomes IPVS persistence with the service's timeout.
//
// # The engine base
//
// A Proxier is an engine.Base (package proxy/engine) plus the IPVS hooks:
// its exported methods are exactly the base's (the Provider handlers,
// Sync, Run, DryRun, Cleanup, Close, Stats, RequestFullSync, Config,
// IPFamily). Config embeds engine.Common (node, family, periods, logger,
// clock, metrics, health servers, the UDP conntrack cleaner, OnSync) and
// adds the IPVS fields; NewProxier(cfg, Interfaces) builds it. The base
// owns the loop, the synced check, the full/partial decision, sync
// metrics, health and stale-UDP conntrack cleanup; this package adds the
// conntrack filters of the UDP virtual and real servers it deletes
// (engine.Result.Conntrack).
//
// # Syncing
//
// Each sync plans (a pure function per service port), diffs and applies.
// Syncs are partial: they replan only the services that changed and issue
// only the operations that differ, so a periodic sync of an unchanged node
// costs next to nothing. A full sync (at start, after a failure, after a
// node label change, every Common.FullSyncPeriod and when drift is found)
// recomputes every plan and compares it with what the kernel reports, so
// state changed behind our back is repaired and state that is already
// right is left alone (a restarted proxier deletes and re-adds nothing);
// it also rewrites the fixed iptables ruleset. A failed operation never
// loses tracker state; the sync returns the first error and the next one
// is full.
//
// The node's addresses (for node ports on every address) are read in one
// netlink address dump per full sync, filtered by link index to leave
// kube-ipvs0 out: its cost grows with the number of addresses, not with
// addresses times interfaces. kube-proxy listed them interface by
// interface (each a whole-node dump) until v1.37 (kubernetes#138927, the
// local-address slowness with tens of thousands of bound cluster IPs);
// this engine makes the single dump (kernelNetlink.LocalAddresses).
//
// The diff is pure: it turns plans (and, on a full sync, the kernel's
// listing) into a list of operations and changes nothing, not even the
// proxier's own records. Draining a real server, adopting one found
// draining, and deleting a drained one are operations of that list; apply
// runs them and updates the graceful-termination queue as it goes. DryRun
// is therefore plan + diff, printed: the operations as ipvsadm / ip /
// ipset commands (graceful ones annotated), then the iptables-restore
// input; it reads the kernel and writes nothing.
//
// # Drift
//
// Every Common.DriftCheckInterval (2 s) between full syncs, the base asks
// this engine whether the node still holds what it wrote; the check is
// cheap: one iptables-save of the nat and of the filter table, whose rule
// counts in our chains and jump rules in the built-in chains must match
// those read back after the last full sync, and one listing of the
// kube-ipvs0 addresses, which must hold every service address. A hand
// flush of our chains or of the whole nat table, a deleted kube-ipvs0 or
// a removed address thus triggers a full sync at once. Virtual servers and
// ipsets changed by hand are repaired by the next full sync
// (Common.FullSyncPeriod) or RequestFullSync.
//
// The proxier deletes only what it owns: virtual servers on addresses bound
// to kube-ipvs0, node-port virtual servers whose port is in its node-port
// sets, and what it programmed itself; never anything inside ExcludeCIDRs
// or of the other IP family.
//
// # Graceful termination
//
// A TCP or SCTP real server that leaves its service is set to weight 0 and
// deleted once its active and inactive connections reach zero or
// GracefulTerminationPeriod passes (checked at every sync; while any are
// draining, each sync asks the base for another within 5 s,
// engine.Result.RequeueAfter). UDP real servers are deleted at once and
// their conntrack entries cleared.
//
// # Differences from kube-proxy v1.37
//
// TestStateMatchesUpstream compares, for every step of the conformance
// table, the IPVS table, kube-ipvs0's addresses, the ipsets and the rules
// with what kube-proxy v1.37.2's ipvs proxier leaves in its own fakes
// (testdata/upstream-v1.37.2). The virtual and real servers, the bound
// addresses and every set's members are the same; the rules are the same
// packet for packet once comments and rules over empty sets are set aside
// (this ruleset is fixed; kube-proxy writes most set rules only while the
// set has members), except:
//
//   - A service with a Local traffic policy and endpoints, none of them on
//     this node, has no real servers here, as in the iptables and nftables
//     modes; kube-proxy's ipvs mode alone gives it every cluster endpoint
//     (kubernetes#97081), whose replies to external clients are dropped.
//   - kube-proxy returns from KUBE-SERVICES at once for loopback sources;
//     this engine has no such rule, so a packet from a loopback address
//     (a local process bound to 127.0.0.1 connecting to a node port on a
//     node address) goes through KUBE-SERVICES like any other.
//   - kube-proxy drops the node's own connections to a load-balancer IP
//     whose source ranges leave the node out, in KUBE-IPVS-OUT-FILTER
//     (kubernetes#119656); this engine does not filter them yet.
//   - KUBE-FORWARD drops conntrack-INVALID packets, as the iptables
//     engine's does; kube-proxy's ipvs mode does not.
//   - Packets to external IPs are accepted by one rule, not kube-proxy's
//     two (off-node sources; local destinations): external IPs are bound
//     to kube-ipvs0, so both accept the same packets.
//
// # Kernel interfaces
//
// The Proxier drives small interfaces (Interfaces): Interface (IPVS over
// generic netlink, github.com/moby/ipvs), IPSet (netfilter netlink, no
// ipset binary), Netlink (the dummy link and addresses), Sysctl, and
// xtables.Runner (package iptables/xtables: this package does not import
// the iptables engine). Package ipvs/ipvskernel holds the real ones
// (ipvskernel.New, NewIPSet, NewNetlink, NewSysctl) and ipvskernel.Probe,
// which tells whether the kernel can do IPVS, for falling back to the
// iptables engine; ipvstest.NewFakes returns stateful fakes of all of them,
// with a packet tracer. Errors wrap ErrNotFound, ErrExists and
// ErrNotSupported (use errors.Is); nothing is retried inside a call.
//
// On iptables-legacy the Runner writes the engine's iptables rules from
// the process (iptables/xtables: on by default for the verified iptables
// and kernel versions; RunnerConfig.LegacyTool, the binary's
// --iptables-legacy-restore-tool and SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0
// switch it off). Every full sync asks it to read back what it writes
// (xtables.Runner.CheckNextRestore); a difference switches it off and fails the
// sync, and the next full sync rewrites the rules through the tool.
//
// Cleanup removes everything the engine owns: its iptables hooks and
// chains, its virtual servers, the kube-ipvs0 addresses and link, and its
// ipsets.
package ipvs
