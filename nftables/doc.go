// Package nftables is kube-proxy's nftables mode as a library: a Proxier on
// the shared engine base (package proxy/engine) that programs the
// "kube-proxy" table of the ip or ip6 family through sigs.k8s.io/knftables.
//
// The table has upstream kube-proxy's layout and names (v1.37): base chains
// filter-prerouting-pre-dnat and filter-output-pre-dnat (the firewall
// check, before DNAT), filter-input, filter-forward and filter-output (the
// endpoint and cluster-IP checks, at filter priority, after DNAT),
// nat-prerouting, nat-output and nat-postrouting;
// dispatch through the verdict maps service-ips (cluster, external and
// load-balancer IPs) and service-nodeports; no-endpoint-services and
// no-endpoint-nodeports to reject (no endpoints) or drop (a Local policy
// with no local endpoint); firewall-ips for loadBalancerSourceRanges; the
// sets cluster-ips, nodeport-ips and hairpin-connections (every local
// endpoint as "ip . ip . proto . port": the masquerading chain
// masquerades a DNATed connection from an endpoint to itself); per
// service port the chains service-HASH-ns/name/proto/port (Cluster
// policy), local-… (Local policy), external-… and firewall-…, the policy
// chains DNATing to the endpoints (through endpoint maps: below);
// endpoint-HASH-…__ip/port
// chains and affinity-… dynamic sets with timeouts only for ClientIP
// affinity. Marking for masquerade is written inline ("mark set mark or
// 0x…": in the services chain for cluster-IP traffic from outside the
// cluster, in the external chains). Comments are cut to 128 bytes. A node
// therefore moves from upstream kube-proxy to this engine and back without
// a traffic gap, and either's cleanup removes the other's table; a table
// of upstream v1.34's (or this engine's older) layout is adopted too: the
// first full sync rewrites every service's chains, chunk by chunk, and
// removes the endpoint chains and the mark-for-masquerade chain they
// jumped to only in its last transaction, once nothing refers to them.
//
// Differences from upstream v1.37.2's table, and why:
//   - Picking an endpoint: a policy chain of several endpoints DNATs
//     with one rule, "meta l4proto P dnat ip to numgen random mod N
//     offset K map @service-endpoints-P-NN", its endpoints the elements
//     K … K+N-1 ("K+i : A . p") of one of the endpoint maps the table
//     declares (service-endpoints-tcp-00 … -63, -udp-00 … -15,
//     -sctp-00 … -03: "typeof numgen random mod 1 : ip daddr . tcp
//     dport"), where upstream writes the same expressions with an
//     inline map ("dnat ip addr . port to numgen random mod N map { 0 :
//     A . p, … }"). Each inline map is an anonymous set in the kernel,
//     which names a new one by scanning every set of the table
//     (nf_tables_set_alloc_name): a cold start is quadratic in the
//     services. A named map per service is not (but nft reads every
//     set's elements to list a chain: seconds at 10,000 services), and
//     one map for all services is quadratic again: the kernel checks
//     every element added to a map against every rule bound to it. A
//     few maps shared by hash are the cheapest of these shapes to load
//     and to list, and replacing an endpoint is then an element deleted
//     and added, which does not make the kernel validate the whole table
//     (BENCHMARKS.md, "which table shape would meet the 1,000-service
//     and partial-sync targets", and the 2026-12-03 entry "endpoint
//     maps" for the engine's figures). The maps are per protocol because
//     nft (1.0.6) refuses a "udp" rule looking up a map it reads back
//     from the kernel declared with "th dport". A chain's map and K come
//     from a hash of its name (K a multiple of 4,096, the next free one
//     when another chain holds it); the rule's comment names them
//     ("svcproxy-slot:M/S", before the content hash), so a restart reads
//     them back with the chains' comments and writes nothing. One
//     endpoint stays a plain "dnat to", as upstream; more than 4,096
//     endpoints, one rule per endpoint ("numgen random mod N-i 0 meta
//     l4proto P dnat to EP"); with ClientIP affinity, one "numgen …
//     goto endpoint-…" rule per endpoint instead of upstream's inline
//     vmap. A table written by upstream (or by this engine's older
//     layouts, rules per endpoint) is adopted as any other: the first
//     full sync declares the maps and rewrites the chains.
//   - The endpoint maps themselves (84 of them, empty where unused): a
//     node moved back to upstream keeps them, unused, until upstream's
//     cleanup deletes the table.
//   - The nodeport-ips set exists (empty) when node ports match every
//     local address, where upstream deletes it.
//   - The first rule of every chain carries a content hash in its comment
//     (below).
//   - The localhost node-port reject map, chains and counters of
//     upstream's KubeProxyNFTablesLocalhostNodePorts gate
//     (Config.LocalhostNodePorts) are diffed like the rest: upstream adds
//     and deletes them on every full sync when it does not want them (the
//     gate off included) and re-adds them when it does; this engine writes
//     them only when missing and deletes them only when found (Localhost
//     node ports, below).
//
// Beyond upstream, for large clusters:
//   - a partial sync never lists the kernel: it diffs the changed services
//     against what the last successful transactions committed (kept in
//     memory) and writes only the chains whose content changed and the map
//     elements added or removed;
//   - a partial sync's transaction, and each chunk of a full sync's,
//     goes to the kernel as one netlink batch
//     (Interfaces.Netlink, set by nftkernel.NewInterfaces), not through nft: nft
//     (1.0.6) reads every chain, set and map of the table back before any
//     transaction that adds a rule, O(table) however small the change.
//     The planner types the per-service rules once (rule.go: a numgen
//     step, a match, a statement); their nft text (dry run, the nft path,
//     the content hash) and their netlink expressions are both rendered
//     from those fields, the text never parsed back. Set and map elements
//     are typed likewise (elem.go: a container, a key of an address,
//     protocol and port, a verdict): the planner, the diff, the record of
//     what the kernel holds and the encoder work on those values; their
//     nft text is rendered only for the dry run and the nft path, a
//     listing read over netlink is decoded into them from the kernel's
//     bytes (ChainCommentLister.ListElements; nldecode.go), and one read
//     through nft is parsed into them once, an element of a form the engine never writes
//     kept as its text and deleted by it. The encoder writes
//     the expressions nft generates for those rules, chains, affinity sets
//     and elements into one reused buffer (so
//     "nft list table" shows the same table, comments and content hashes
//     included), firewall rules with several source ranges as the
//     anonymous interval sets nft makes of them; a change set holding
//     anything else (the table, its sets and maps, base chains and the
//     fixed chains' rules; source ranges that overlap or touch, which nft
//     merges, or that reach the last address) goes through nft whole, as
//     the dry run always does. The kernel
//     applies a batch atomically; the engine records it only once the
//     kernel acknowledged it. A batch the kernel refuses (*BatchError:
//     nothing of it applied) is written again through nft at once; if nft
//     refuses it too, the sync fails and the next one is full. The
//     writer's switch, fallback and self-check are below. What remains O(table) is the
//     kernel's own check of the table at commit (loop and hook
//     validation of every rule of every chain reachable from the base
//     chains), which a transaction pays when it adds a jump or goto
//     element to a verdict map or a rule holding any expression the
//     kernel validates: an immediate value (a verdict, but also a DNAT
//     address or a mark), nat, masquerade, reject, fib, a set lookup.
//     A partial sync that only replaces endpoints writes elements of the
//     endpoint maps and does not pay it; one that changes a service's
//     number of endpoints rewrites its policy chain's rule and pays it
//     (about three quarters of its CPU at 10,000 services with rules
//     per endpoint); flushing a chain, deleting rules and adding or
//     deleting elements of sets and data maps do not (BENCHMARKS.md);
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
//     else has committed in the network namespace since (resync.go). A
//     periodic or requested one that lists nothing plans again only the
//     services the change tracker reports changed since the last sync,
//     and services whose recorded plan the engine's record of the table
//     does not hold; every other service's recorded plan is taken as it
//     is. Any
//     other writer's commit moves the generation, so a chain of ours that
//     another writer put back is listed and removed (flushed, then
//     deleted) by the next full resync;
//   - a full sync that writes many services (a cold start) is split into
//     transactions of about Config.MaxTransactionOps operations, whole
//     services each, so traffic to the first services flows before the
//     last are written; into an empty table, or one flushed by hand, the
//     fixed part (table, sets, maps, base and fixed chains) goes first,
//     alone, through nft, and every chunk of services after it over
//     netlink;
//   - drift (the table deleted or flushed behind the engine's back) is
//     found by listing one two-rule chain every DriftCheckInterval (over
//     netlink: nft's listing of one chain reads every set's elements of
//     the table), and repaired by a full sync.
//
// # Localhost node ports
//
// Config.LocalhostNodePorts is upstream v1.37's
// KubeProxyNFTablesLocalhostNodePorts gate (KEP-6032; alpha and off in
// v1.37, beta and on in v1.38), off in the zero Config as in v1.37. The
// table never DNATs traffic to a loopback address (the node-port dispatch
// excludes 127.0.0.0/8 and ::1; nodeport-ips never holds them). Off, that
// is all: a connection to 127.0.0.1:<node port> reaches whatever listens
// there, usually nothing, and the table holds no localhost objects (a
// full sync removes those an earlier run with the gate on left). On, with
// upstream's names: the map localhost-nodeport-reject-ports (type
// inet_proto . inet_service : verdict), one element per node port whose
// protocol is rejected ("udp . 30053 : goto localhost-nodeport-reject-udp"),
// looked up by a rule at the end of nodeport-endpoints-check ("ip daddr
// 127.0.0.0/8" or "ip6 daddr ::1"); per rejected protocol the chain
// localhost-nodeport-reject-<proto> holding 'counter name
// "localhost-nodeport-rejected-<proto>" reject', and that named counter
// (the packets rejected, which upstream exports as
// kubeproxy_nftables_localhost_nodeport_rejected_packets_total). When
// Config.NodePortAddresses names a loopback prefix of the family itself
// (127.0.0.0/8, 127.0.0.1/32, ::1/128; 0.0.0.0/0 does not count) UDP and
// SCTP are rejected; otherwise TCP too.
//
// In the first case a userspace proxy (upstream's localnodeportproxy)
// listens on 127.0.0.1 (::1) at each TCP node port that has endpoints
// (the ready endpoints for external traffic: the local ones under
// externalTrafficPolicy Local; none, no listener, so the kernel refuses)
// and forwards each connection to an endpoint picked at random, dialled
// within 5 s (a failed dial closes the client's connection); ClientIP
// affinity pins one endpoint per node port while it stays in the set and
// was used within the timeout (every local client has the same address).
// The bytes are copied by internal/tcprelay, the userspace engine's data
// path (spliced, half-closes passed on). Listeners open on the sync
// goroutine, in its network namespace, after the transaction succeeded;
// a node port that loses its endpoints or its service loses its listener
// and the connections through it, an endpoint change keeps established
// connections; a listener that cannot be opened is logged, counted and
// retried by the next sync. Close and Cleanup close every listener and
// connection (the next sync after Cleanup opens them again).
// Interfaces.LocalhostSockets opens the sockets (nil: the calling
// thread's namespace). Metrics, with upstream's names:
// kubeproxy_nftables_localhost_nodeport_listeners and
// kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total
// (through Config.Metrics), and
// kubeproxy_nftables_localhost_nodeport_rejected_packets_total from the
// named counters (LocalhostRejectedPackets with
// metrics.NewLocalhostNodePortRejectedCollector).
//
// # The netlink writer: switch, fallback, self-check
//
// The netlink writer bypasses nft, so it can be switched off without a
// rebuild and watches itself:
//   - switch: Config.NFTOnly (the binary's --nftables-netlink=false), or
//     the environment variable SVCPROXY_NFTABLES_NETLINK=0, makes nft
//     write everything; by default the writer is on only where the nft
//     that nftkernel.NewInterfaces found (Interfaces.NFTVersion) and the running
//     kernel are within the versions it was verified with
//     (internal/fastpath: today nft 1.0.6 to 1.1.3 on kernels from 6.1),
//     and SVCPROXY_NFTABLES_NETLINK=1 turns it on elsewhere. NewProxier
//     logs one line saying which writes and why. Cleanup always deletes
//     the table through nft.
//   - fallback: a refused batch goes through nft (above); after 3 batches
//     nft took that the kernel refused over netlink, the writer is off for
//     the life of the Proxier, logged at error level.
//   - self-check: the first batch written over netlink, and the first of
//     every full sync, is read back: a sample of the chains it wrote (4:
//     the first of each kind, then spread over the batch), over netlink (a
//     get and a rule dump per chain; nft's listing of one chain reads the
//     elements of every set of the table: four such listings took 2 s of
//     a 40,000-service cold start, and the whole table's listing 28 s and
//     1 GB of nft's memory at 10,000): each sampled chain must exist and
//     hold the planned number of rules, each with its planned comment
//     (the first carries the chain's content hash). A
//     difference (rules missing, added, replaced or reordered by another
//     writer) turns the writer off, is logged at error level and fails
//     the sync with ErrSelfCheck; the next sync, a full one through nft,
//     repairs the table. The rules' expressions are not compared, nor
//     parsed by nft, at run time; the kernel tests compare nft's listing
//     of tables written both ways.
//   - NetlinkStatsOf(p) says whether the writer is on, why it was
//     switched off, and counts the refusals and read-backs; with
//     Config.Metrics, kubeproxy_fast_writer_active,
//     kubeproxy_fast_writer_handed_to_tool_total and
//     kubeproxy_fast_writer_switched_off_total (writer
//     "nftables-netlink") count them too.
//   - memory: batches are encoded into 256 KiB arenas mapped outside the
//     Go heap (internal/offheap), reused from batch to batch; after each
//     sync all but four give their pages back to the kernel. A cold
//     start's chunk is tens of MiB: as heap, held in a sync.Pool, the
//     arenas stayed live until two collections after the sync and raised
//     the collector's goal for that long (the memory held between syncs
//     after a 10,000-service cold start fell from 87 to 72 MiB of heap plus
//     1 MiB of arenas; BENCHMARKS.md). A NetlinkWriter must therefore keep
//     nothing of the messages once WriteBatch returned, whatever it
//     returned. SVCPROXY_NFTABLES_HEAP_BUFFERS=1 keeps the arenas on the Go
//     heap (under GOMEMLIMIT), as does a failed mmap; NetlinkStatsOf
//     and, with Config.Metrics, kubeproxy_fast_writer_buffer_bytes
//     (state resident or mapped) report their bytes.
//   - element lists: the elements a transaction adds go in one message
//     per set, map or endpoint map (the encoder groups them so; the order
//     of additions within a transaction is free), each list closed at
//     63 KiB and continued in another message: a netlink attribute's
//     length is 16 bits, and a service of 4,096 endpoints, or a firewall
//     set of thousands of source ranges, takes more.
//   - the record of the table shares the plans' values: a slot of an
//     endpoint map a sync wrote whole records the plan's own elements
//     (copied only when part of it changes), and the record of the other
//     sets and maps keeps packed keys pointing at the plans' verdicts.
//     The change sets point into the plans too, and a full sync's chunks
//     reuse the maps, slices and message slice of the chunks already
//     written: a 10,000-service cold start allocates about 20 MB besides
//     the change tracker's work (BENCHMARKS.md).
//
// Removed chains are flushed at once and deleted by a later sync (about a
// second later: kernels before 6.2 notice late that a chain is no longer
// referenced), as upstream does.
//
// The engine needs Linux, nft ≥ 1.0.1 and kernel ≥ 5.13, as upstream:
// nftkernel.NewInterfaces refuses a host below either with a *VersionError that names
// the requirement (CheckHostVersions; KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK
// set to anything skips the kernel check, as it does upstream), and
// examples/minimal-proxy then falls back to the iptables mode. On other
// systems the package is empty. Package nftablestest has the fake (over
// knftables.Fake) and a packet tracer for tests.
//
// # The driver
//
// What the engine drives is Interfaces: knftables.Interface (the nft
// binary, or a fake) and the interfaces this package declares for what
// nft is too slow at, each optional in Interfaces and, when set, used
// through its required methods only: ChainCommentLister (the table read
// over netlink: full syncs, the self-check, the drift check),
// GenerationReader (the ruleset generation id) and NetlinkWriter (a
// transaction as one netlink batch, the bytes WireBatch lays out; a
// refusal a *BatchError). Nothing is asked of a driver by type assertion
// and nothing of what the engine decides depends on a driver's concrete
// type, so a wrapper that embeds an interface, or forwards each method
// with its arguments (ctx included) as it got them, leaves the engine as
// it was (TestKernelForwardingInterfacesSameEngine,
// TestWireLayoutReachesWrappedWriter). The rendering of the plan for the
// kernel is the engine's (nlencode.go, nlbatch.go, and nldecode.go for
// the elements read back); package nftkernel is the real driver, over
// netlink in the calling thread's network namespace, and its
// NewInterfaces builds the Interfaces of a node.
package nftables
