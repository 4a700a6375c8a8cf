// Command minimal-proxy is svcproxy's reference binary: a Kubernetes
// service proxy with kube-proxy's flags and configuration file, built from
// the library in a few short files. Read it to see how to embed svcproxy:
//
//   - flags.go, config.go, validate.go: kube-proxy's flags (pflag) and its
//     KubeProxyConfiguration file (kubeproxy.config.k8s.io/v1alpha1),
//     decoded strictly into our own struct; flags given on the command line
//     override the file; every refused setting is named in the error.
//   - source.go: where objects come from: client-go informers
//     (proxy/informers, with kube-proxy's label selectors) or an objects
//     file (--objects-file), and the node's addresses.
//   - mode.go, engine*.go: mode selection with kube-proxy's fallbacks
//     (ipvs → iptables when the kernel has no IPVS, iptables → userspace
//     when iptables is missing or older than 1.4.11; each logged with its
//     reason) and the construction of the engines: one per IP family of the
//     node's addresses (dual stack through engine.NewDualStack) in the
//     iptables, ipvs, nftables and kernelspace modes, the primary family in
//     the userspace mode. Every engine is driven through the one surface
//     they share (engine.Proxier): no per-mode wrapper. On iptables-legacy
//     the iptables Runner writes the tables from the process;
//     --iptables-legacy-restore-tool (ours, not kube-proxy's; also read by
//     --cleanup) makes it run iptables-legacy-restore for every restore
//     instead. The nftables mode sends what its encoder knows over
//     netlink; --nftables-netlink=false (ours) makes nft write
//     everything. SVCPROXY_IPTABLES_LEGACY_IN_PROCESS and
//     SVCPROXY_NFTABLES_NETLINK (0 or 1) switch the same writers from the
//     environment; both are on by default only for the tool and kernel
//     versions they were verified with, read back their first write and
//     every full sync's, and switch themselves off on a difference or
//     repeated refusals (README: the fast writers; the
//     kubeproxy_fast_writer_* metrics count it). --init-only writes no
//     table, by either writer or its tool, whatever the switches say
//     (TestInitOnlyHonoursWriterSwitches).
//   - serve.go: /healthz and /livez on the healthz address
//     (proxy/healthcheck), /metrics, /proxyMode and /configz on the metrics
//     address (proxy/metrics), health-check node ports for
//     externalTrafficPolicy: Local services.
//   - dryrun.go: --dry-run prints what the engine would program (its
//     DryRun, over in-memory fakes) and exits 0 without reading or changing
//     the node: the iptables-restore input, the IPVS mode's ipvsadm / ipset
//     / ip commands and rules, the nftables transaction, the userspace
//     mode's listeners and capture rules, or the HNS objects. It needs
//     neither root nor iptables.
//   - subcommands.go, trace*.go: subcommands, apart from kube-proxy's
//     flags (--help lists them first). "minimal-proxy trace --from SRC
//     --to DST:PORT/PROTO" reads the node's current dataplane read-only
//     with the standard tools (iptables-nft-save / iptables-legacy-save,
//     whichever holds kube-proxy's chains; nft list table for the
//     nftables mode; for the ipvs mode the IPVS table, KUBE- ipsets and
//     kube-ipvs0's addresses over netlink, with the iptables rules; for
//     the kernelspace mode the HNS network, endpoints and load balancers
//     on Windows, or on any system an HNS dump, --from-dump, in
//     winkerneltest's format; trace_winkernel.go),
//     whether a proxy runs or not and whoever wrote the
//     rules, loads it into the shipped fake and traces one new connection
//     with the shipped tracer: the backends with their probabilities,
//     masquerade, drop or reject, and every rule on each path with the
//     Service its comment names ("-o json" for scripts). It says what it
//     cannot read (not root, a tool missing, a rule the tracer does not
//     model) and never guesses past it. A kernel test runs the conformance
//     table in network namespaces and requires trace to agree with real
//     packets on every check (ipvs in the qemu guest of hack/vmtest where
//     the host has no IPVS). "minimal-proxy diff [the proxy's flags]"
//     builds the plan a sync would apply (the dry run, from the cluster or
//     --objects-file) and compares it with the node's rules, printing the
//     commands that would make them equal and exiting 3 when they differ,
//     0 when they do not: iptables commands in the iptables mode (the
//     built-in chains' jumps are not compared), nft commands in the
//     nftables mode (both tables as nft lists them: the plan is loaded
//     into a scratch network namespace and listed back; the dynamic
//     affinity sets' elements are not compared; diff_nftables_linux.go);
//     ipvsadm, ip addr and ipset commands then iptables commands in the
//     ipvs mode, where the engine's own dry run runs over the node's
//     IPVS state loaded into ipvstest's fakes, so it prints the ops a
//     sync would run there (diff_ipvs.go).
//   - cleanup.go: --cleanup removes what any mode left behind, ours or
//     kube-proxy's, and nothing else.
//   - features.go, logging.go, conntrack.go, privileges.go, version.go:
//     kube-proxy's feature gates, logging flags (text or JSON lines with
//     the logger name as a key), conntrack sysctls (as kube-proxy v1.34:
//     a read-only one is a warning), the CAP_NET_ADMIN check a real run
//     and --cleanup make before anything starts, and --version.
//   - main.go: run until SIGTERM or SIGINT, then stop within a second,
//     leaving the rules in place; a restarted proxy adopts them without
//     flushing (traffic keeps flowing across the restart).
//
// # Quick start
//
//	go run ./examples/minimal-proxy --objects-file examples/minimal-proxy/demo.yaml --dry-run
//
// With --objects-file and no --hostname-override, a file holding exactly
// one Node makes that Node this proxy's node. Against a cluster (as root):
//
//	minimal-proxy --kubeconfig /var/lib/kube-proxy/kubeconfig.conf --proxy-mode iptables
//
// # Guarantees
//
//   - Nothing on the node changes before the Services and EndpointSlices
//     have been listed in full (the library's contract); /healthz answers
//     503 until the first successful sync, and while the API server is
//     unreachable the proxy keeps retrying and logs each failure.
//   - Bad flags, a bad configuration file or a malformed objects file exit
//     with status 2 (flags, configuration) or 1 (everything else) and a
//     message naming the setting or the document, printed once; never a
//     panic. A real run or --cleanup without CAP_NET_ADMIN exits 1 at once
//     saying so; a dry run gives up on an API server that does not answer
//     within 45 seconds.
//   - A running proxy keeps its state when the objects file stops parsing
//     as a whole (empty, binary, cut off): replace it by renaming a
//     complete file over it (see proxy/filesource).
//   - SIGTERM exits with status 0.
//
// # Exit codes
//
// 0: stopped by a signal, --cleanup or --dry-run done, or --help.
// 3: diff found the node's rules differ from the plan.
// 1: a runtime failure (unreachable kubeconfig file, unreadable objects
// file, a failing engine). 2: bad flags or configuration.
//
// # Not done
//
// Feature gates are accepted as kube-proxy v1.34 accepts them, plus
// v1.37's KubeProxyNFTablesLocalhostNodePorts (alpha, off; AllAlpha turns
// it on), the only one that changes behaviour here: in the nftables mode
// it is nftables.Config.LocalhostNodePorts (localhost node ports served by
// a userspace TCP proxy when --nodeport-addresses names loopback, else
// rejected and counted; kubeproxy_nftables_localhost_nodeport_rejected_packets_total
// is registered with it, as in kube-proxy). --vmodule, the info buffer sizes,
// --log-flush-frequency, --boot-id-file and --machine-id-file are accepted
// without effect (logged once at start). --iptables-localhost-nodeports
// (iptables.localhostNodePorts, default true) is the iptables engine's
// Config.LocalhostNodePorts; the other modes ignore it, as kube-proxy's
// do, and say so once when it is given or false.
// detectLocalMode NodeCIDR reads the Node's podCIDRs once at start (it does
// not wait for them to be assigned, as kube-proxy does). The userspace mode
// serves only the node's primary family and has no --dry-run. The
// kernelspace (Windows) mode is refused until the winkernel engine exists.
//
// # Tests
//
// go test ./examples/minimal-proxy runs everything that needs no root
// (flags, configuration, dry runs, the binary against an unreachable API
// server). As root it also runs the binary in network namespaces of its
// own (every mode, --cleanup, an objects file, a dry run that must change
// nothing) and the end-to-end test TestE2EKubeAPIServer: a real etcd and
// kube-apiserver (built once by hack/e2e/build.sh into
// ~/.cache/svcproxy-e2e; a test without them skips saying so) inside the
// conformance topology's node namespace, every proxytest scenario driven
// through the API for IPv4 and IPv6 and checked with real connections,
// then a restart over the rules. TestE2EKubeAPIServer runs the iptables
// and then the userspace mode on one control plane per IP family (the two
// families in parallel); TestE2EKubeAPIServerIPVS runs the ipvs mode;
// where the host's kernel has no IPVS, the
// last runs itself with etcd, kube-apiserver and the binary inside a qemu
// guest that has it (hack/vmtest/run-e2e-ipvs.sh, its waits stretched by
// $SVCPROXY_E2E_SLOWDOWN for the emulation). $SVCPROXY_E2E_ETCD and
// $SVCPROXY_E2E_KUBE_APISERVER name prebuilt binaries instead;
// $SVCPROXY_E2E_CACHE moves the cache; $SVCPROXY_MINIMAL_PROXY names a
// prebuilt minimal-proxy. Each mode's IPv4 cluster runs kube-apiserver
// v1.34 and its IPv6 cluster v1.37 (hack/e2e/build.sh --kube 1.37), so one
// run of the tests passes every mode against both ends of the client-library
// window; $SVCPROXY_E2E_KUBE=1.34 or 1.37 puts every cluster on one version
// ($SVCPROXY_E2E_ETCD_1_37 and $SVCPROXY_E2E_KUBE_APISERVER_1_37 name
// prebuilt binaries of one version).
package main
