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
//     on the Config: service changes touch ipsets, never iptables;
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
// # Syncing
//
// Each sync plans (a pure function per service port), diffs and applies.
// The first sync, the first after a failure, one after a node label change
// and one per SyncPeriod are full: all plans are recomputed and compared
// with what the kernel reports, so drift is repaired and state that is
// already right is left alone (a restarted proxier deletes and re-adds
// nothing). Other syncs replan only the services that changed and issue
// only the operations that differ. A failed operation never loses tracker
// state; the sync returns the first error and the next one is full.
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
// GracefulTerminationPeriod passes (checked at every sync; Run syncs every
// few seconds while any are waiting). UDP real servers are deleted at once
// and their conntrack entries cleared.
//
// # Kernel interfaces
//
// The Proxier drives small interfaces: Interface (IPVS over generic netlink,
// github.com/moby/ipvs), IPSet (netfilter netlink, no ipset binary), Netlink
// (the dummy link and addresses), Sysctl, iptables.Runner and a conntrack
// cleaner. New, NewIPSet, NewNetlink and NewSysctl return the real ones;
// package ipvstest has stateful fakes and a packet tracer. Probe tells
// whether the kernel can do IPVS, for falling back to the iptables engine.
// Errors wrap ErrNotFound, ErrExists and ErrNotSupported (use errors.Is);
// nothing is retried inside a call.
//
// DryRun renders what a full sync would do (ipvsadm / ip / ipset commands
// and the iptables-restore input) without changing anything, and Cleanup
// removes everything the engine owns.
package ipvs
