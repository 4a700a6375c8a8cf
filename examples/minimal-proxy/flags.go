package main

// Flags use github.com/spf13/pflag (already in the module through
// client-go) because kube-proxy's flags are pflag flags: "--flag=value",
// comma-separated lists, and durations as "30s" behave the same here.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy/informers"
)

// options is the fully resolved command line: the merged configuration plus
// the settings that exist only as flags.
type options struct {
	config *KubeProxyConfiguration

	configFile  string
	master      string
	cleanup     bool
	objectsFile string
	dryRun      bool
	// legacyRestoreTool: with iptables-legacy, every restore runs
	// iptables-legacy-restore (xtables.RunnerConfig.LegacyTool).
	legacyRestoreTool bool
	// nftOnly: the nftables mode writes everything through nft
	// (nftables.Config.NFTOnly): --nftables-netlink=false.
	nftOnly bool
	// excludeClusterCIDRs are endpoint CIDRs this proxy leaves to another
	// proxy on the node (multi-network); serviceProxyName is the value of
	// service.kubernetes.io/service-proxy-name this proxy owns.
	excludeClusterCIDRs []netip.Prefix
	serviceProxyName    string

	// writeConfigTo: write the effective configuration there and exit.
	writeConfigTo string
	// initOnly: apply the node settings that need full root (conntrack
	// sysctls, OOM score), then exit.
	initOnly bool
	// version: print the versions and exit ("true" or "raw").
	version versionFlag
	// localhostNodePortsSet: --iptables-localhost-nodeports was given, or
	// iptables.localhostNodePorts is false (logged once by a mode that
	// ignores it).
	localhostNodePortsSet bool
	// noEffect names the settings given that are accepted for kube-proxy
	// compatibility but change nothing here; serve logs them once.
	noEffect []string
	// privileges is how a real run checks that it may program the node
	// (zero: this process); tests inject theirs.
	privileges privilegeChecks
	// dryRunAPIWait bounds a dry run's wait for the API server (zero:
	// the dryRunAPIWait constant); tests shorten it.
	dryRunAPIWait time.Duration
	// ipvsNode, when set, gives the ipvs mode's dry run the node's state
	// (read read-only, loaded into ipvstest's fakes) instead of empty
	// fakes, so its plan is what a sync would change there (diff).
	ipvsNode func(family v1.IPFamily) (*ipvstest.Fakes, error)
}

// errHelp is returned by parseOptions for -h/--help; usage has been printed.
var errHelp = pflag.ErrHelp

// flagOverrides copies one flag's value from the flag-bound configuration
// into the configuration loaded from --config. Only flags given on the
// command line are copied, so the file wins over flag defaults and explicit
// flags win over the file.
var flagOverrides = map[string]func(dst, flags *KubeProxyConfiguration){
	"kubeconfig":               func(d, f *KubeProxyConfiguration) { d.ClientConnection.Kubeconfig = f.ClientConnection.Kubeconfig },
	"proxy-mode":               func(d, f *KubeProxyConfiguration) { d.Mode = f.Mode },
	"hostname-override":        func(d, f *KubeProxyConfiguration) { d.HostnameOverride = f.HostnameOverride },
	"bind-address":             func(d, f *KubeProxyConfiguration) { d.BindAddress = f.BindAddress },
	"cluster-cidr":             func(d, f *KubeProxyConfiguration) { d.ClusterCIDR = f.ClusterCIDR },
	"masquerade-all":           func(d, f *KubeProxyConfiguration) { d.IPTables.MasqueradeAll = f.IPTables.MasqueradeAll },
	"iptables-masquerade-bit":  func(d, f *KubeProxyConfiguration) { v := *f.IPTables.MasqueradeBit; d.IPTables.MasqueradeBit = &v },
	"iptables-sync-period":     func(d, f *KubeProxyConfiguration) { d.IPTables.SyncPeriod = f.IPTables.SyncPeriod },
	"iptables-min-sync-period": func(d, f *KubeProxyConfiguration) { d.IPTables.MinSyncPeriod = f.IPTables.MinSyncPeriod },
	"ipvs-scheduler":           func(d, f *KubeProxyConfiguration) { d.IPVS.Scheduler = f.IPVS.Scheduler },
	"ipvs-exclude-cidrs":       func(d, f *KubeProxyConfiguration) { d.IPVS.ExcludeCIDRs = f.IPVS.ExcludeCIDRs },
	"ipvs-strict-arp":          func(d, f *KubeProxyConfiguration) { d.IPVS.StrictARP = f.IPVS.StrictARP },
	"ipvs-sync-period":         func(d, f *KubeProxyConfiguration) { d.IPVS.SyncPeriod = f.IPVS.SyncPeriod },
	"ipvs-min-sync-period":     func(d, f *KubeProxyConfiguration) { d.IPVS.MinSyncPeriod = f.IPVS.MinSyncPeriod },
	"nodeport-addresses":       func(d, f *KubeProxyConfiguration) { d.NodePortAddresses = f.NodePortAddresses },
	"proxy-port-range":         func(d, f *KubeProxyConfiguration) { d.PortRange = f.PortRange },
	"udp-timeout":              func(d, f *KubeProxyConfiguration) { d.UDPIdleTimeout = f.UDPIdleTimeout },
	"healthz-bind-address":     func(d, f *KubeProxyConfiguration) { d.HealthzBindAddress = f.HealthzBindAddress },
	"metrics-bind-address":     func(d, f *KubeProxyConfiguration) { d.MetricsBindAddress = f.MetricsBindAddress },
	"config-sync-period":       func(d, f *KubeProxyConfiguration) { d.ConfigSyncPeriod = f.ConfigSyncPeriod },
	"detect-local-mode":        func(d, f *KubeProxyConfiguration) { d.DetectLocalMode = f.DetectLocalMode },
	"pod-bridge-interface":     func(d, f *KubeProxyConfiguration) { d.DetectLocal.BridgeInterface = f.DetectLocal.BridgeInterface },
	"pod-interface-name-prefix": func(d, f *KubeProxyConfiguration) {
		d.DetectLocal.InterfaceNamePrefix = f.DetectLocal.InterfaceNamePrefix
	},
	"v":                   func(d, f *KubeProxyConfiguration) { d.Logging.Verbosity = f.Logging.Verbosity },
	"logging-format":      func(d, f *KubeProxyConfiguration) { d.Logging.Format = f.Logging.Format },
	"vmodule":             func(d, f *KubeProxyConfiguration) { d.Logging.VModule = f.Logging.VModule },
	"log-flush-frequency": func(d, f *KubeProxyConfiguration) { d.Logging.FlushFrequency = f.Logging.FlushFrequency },
	"log-text-split-stream": func(d, f *KubeProxyConfiguration) {
		d.Logging.Options.Text.SplitStream = f.Logging.Options.Text.SplitStream
	},
	"log-json-split-stream": func(d, f *KubeProxyConfiguration) {
		d.Logging.Options.JSON.SplitStream = f.Logging.Options.JSON.SplitStream
	},
	"log-text-info-buffer-size": func(d, f *KubeProxyConfiguration) {
		d.Logging.Options.Text.InfoBufferSize = f.Logging.Options.Text.InfoBufferSize
	},
	"log-json-info-buffer-size": func(d, f *KubeProxyConfiguration) {
		d.Logging.Options.JSON.InfoBufferSize = f.Logging.Options.JSON.InfoBufferSize
	},
	"feature-gates": func(d, f *KubeProxyConfiguration) {
		if d.FeatureGates == nil {
			d.FeatureGates = map[string]bool{}
		}
		for k, v := range f.FeatureGates {
			d.FeatureGates[k] = v
		}
	},
	"kube-api-qps":           func(d, f *KubeProxyConfiguration) { d.ClientConnection.QPS = f.ClientConnection.QPS },
	"kube-api-burst":         func(d, f *KubeProxyConfiguration) { d.ClientConnection.Burst = f.ClientConnection.Burst },
	"kube-api-content-type":  func(d, f *KubeProxyConfiguration) { d.ClientConnection.ContentType = f.ClientConnection.ContentType },
	"bind-address-hard-fail": func(d, f *KubeProxyConfiguration) { d.BindAddressHardFail = f.BindAddressHardFail },
	"profiling":              func(d, f *KubeProxyConfiguration) { d.EnableProfiling = f.EnableProfiling },
	"show-hidden-metrics-for-version": func(d, f *KubeProxyConfiguration) {
		d.ShowHiddenMetricsForVersion = f.ShowHiddenMetricsForVersion
	},
	"oom-score-adj": func(d, f *KubeProxyConfiguration) { v := *f.OOMScoreAdj; d.OOMScoreAdj = &v },
	"iptables-localhost-nodeports": func(d, f *KubeProxyConfiguration) {
		v := *f.IPTables.LocalhostNodePorts
		d.IPTables.LocalhostNodePorts = &v
	},
	"ipvs-tcp-timeout":    func(d, f *KubeProxyConfiguration) { d.IPVS.TCPTimeout = f.IPVS.TCPTimeout },
	"ipvs-tcpfin-timeout": func(d, f *KubeProxyConfiguration) { d.IPVS.TCPFinTimeout = f.IPVS.TCPFinTimeout },
	"ipvs-udp-timeout":    func(d, f *KubeProxyConfiguration) { d.IPVS.UDPTimeout = f.IPVS.UDPTimeout },
	"conntrack-max-per-core": func(d, f *KubeProxyConfiguration) {
		v := *f.Conntrack.MaxPerCore
		d.Conntrack.MaxPerCore = &v
	},
	"conntrack-min": func(d, f *KubeProxyConfiguration) { v := *f.Conntrack.Min; d.Conntrack.Min = &v },
	"conntrack-tcp-timeout-established": func(d, f *KubeProxyConfiguration) {
		v := *f.Conntrack.TCPEstablishedTimeout
		d.Conntrack.TCPEstablishedTimeout = &v
	},
	"conntrack-tcp-timeout-close-wait": func(d, f *KubeProxyConfiguration) {
		v := *f.Conntrack.TCPCloseWaitTimeout
		d.Conntrack.TCPCloseWaitTimeout = &v
	},
	"conntrack-tcp-be-liberal":     func(d, f *KubeProxyConfiguration) { d.Conntrack.TCPBeLiberal = f.Conntrack.TCPBeLiberal },
	"conntrack-udp-timeout":        func(d, f *KubeProxyConfiguration) { d.Conntrack.UDPTimeout = f.Conntrack.UDPTimeout },
	"conntrack-udp-timeout-stream": func(d, f *KubeProxyConfiguration) { d.Conntrack.UDPStreamTimeout = f.Conntrack.UDPStreamTimeout },
}

// deprecatedFlagAliases are deprecated flags that set what another flag
// sets, for flagOverrides.
var deprecatedFlagAliases = map[string]string{
	"healthz-port":     "healthz-bind-address",
	"metrics-port":     "metrics-bind-address",
	"cleanup-iptables": "cleanup",
}

// addressWithPort is what kube-proxy's deprecated --healthz-port and
// --metrics-port do to a bind address: port 0 disables the server, any
// other replaces the address's port.
func addressWithPort(addr string, port int32) string {
	if port == 0 {
		return ""
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// settingsWithoutEffect names the configured settings that kube-proxy
// honours but that change nothing here.
func settingsWithoutEffect(cfg *KubeProxyConfiguration) []string {
	var out []string
	if len(cfg.Logging.VModule) > 0 {
		out = append(out, "logging.vmodule (verbosity is per process)")
	}
	if !cfg.Logging.Options.Text.InfoBufferSize.IsZero() || !cfg.Logging.Options.JSON.InfoBufferSize.IsZero() {
		out = append(out, "logging.options.*.infoBufferSize (lines are not buffered)")
	}
	if cfg.ShowHiddenMetricsForVersion != "" {
		out = append(out, "showHiddenMetricsForVersion (no metric is hidden)")
	}
	return out
}

// parseOptions parses args (without the program name), loads --config,
// applies explicit flags over it and validates the result for goos.
// Usage and flag errors are written to stderr.
func parseOptions(args []string, goos string, stderr io.Writer) (*options, error) {
	o := &options{}
	fv := defaultConfig() // flags bind here
	var masqBit int32 = *fv.IPTables.MasqueradeBit
	var exclude []string
	var nftablesNetlink bool

	fs := pflag.NewFlagSet("minimal-proxy", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: minimal-proxy [flags]\n       minimal-proxy SUBCOMMAND [flags]\n\nThe svcproxy reference service proxy: kube-proxy's flags and configuration file.\n\n")
		writeSubcommandsUsage(stderr)
		fmt.Fprintf(stderr, "\nFlags (kube-proxy's):\n")
		fs.PrintDefaults()
	}

	fs.StringVar(&o.configFile, "config", "", "The path to a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file. Flags given on the command line override its values.")
	fs.StringVar(&fv.ClientConnection.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file with authorization information (the API server is taken from --master when set). Empty: in-cluster configuration.")
	fs.StringVar(&o.master, "master", "", "The address of the Kubernetes API server (overrides any value in the kubeconfig).")
	fs.StringVar(&fv.Mode, "proxy-mode", "", "Which proxy mode to use: 'iptables' (default on Linux), 'ipvs' (falls back to iptables without kernel IPVS), 'nftables' (falls back to iptables without nft 1.0.1 or later), 'userspace' (also the fallback when iptables is missing or too old), or 'kernelspace' (Windows).")
	fs.StringVar(&fv.HostnameOverride, "hostname-override", "", "If non-empty, will be used as the name of the Node this proxy runs on instead of the hostname.")
	fs.StringVar(&fv.BindAddress, "bind-address", fv.BindAddress, "The IP address the userspace mode's proxy sockets bind (0.0.0.0 for all IPv4 interfaces, :: for all IPv6).")
	fs.StringVar(&fv.ClusterCIDR, "cluster-cidr", "", "The CIDR range(s) of the pods in the cluster (comma-separated, at most one per IP family). Traffic from outside it to a service IP is masqueraded.")
	fs.BoolVar(&fv.IPTables.MasqueradeAll, "masquerade-all", false, "SNAT all traffic sent via service cluster IPs (iptables, ipvs and nftables modes).")
	fs.Int32Var(&masqBit, "iptables-masquerade-bit", masqBit, "The bit of the fwmark space (0..31) that marks packets needing SNAT.")
	fs.DurationVar(&fv.IPTables.SyncPeriod.Duration, "iptables-sync-period", fv.IPTables.SyncPeriod.Duration, "The maximum interval between full resyncs of the iptables rules (e.g. '5s', '1m'). Must be greater than 0.")
	fs.DurationVar(&fv.IPTables.MinSyncPeriod.Duration, "iptables-min-sync-period", fv.IPTables.MinSyncPeriod.Duration, "The minimum interval between iptables rule resyncs as endpoints and services change (e.g. '5s', '1m').")
	fs.StringVar(&fv.IPVS.Scheduler, "ipvs-scheduler", "", "The IPVS scheduler: rr, wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq or mh (empty: rr).")
	fs.StringSliceVar(&fv.IPVS.ExcludeCIDRs, "ipvs-exclude-cidrs", nil, "A comma-separated list of CIDRs the IPVS mode must not touch when cleaning up IPVS rules.")
	fs.BoolVar(&fv.IPVS.StrictARP, "ipvs-strict-arp", false, "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2.")
	fs.DurationVar(&fv.IPVS.SyncPeriod.Duration, "ipvs-sync-period", fv.IPVS.SyncPeriod.Duration, "The maximum interval between full resyncs of the IPVS rules.")
	fs.DurationVar(&fv.IPVS.MinSyncPeriod.Duration, "ipvs-min-sync-period", 0, "The minimum interval between IPVS rule resyncs as endpoints and services change.")
	fs.StringSliceVar(&fv.NodePortAddresses, "nodeport-addresses", nil, "A comma-separated list of CIDRs whose node addresses accept NodePort traffic, or 'primary' for the node's primary IPs. Empty: all local addresses.")
	fs.StringVar(&fv.PortRange, "proxy-port-range", "", "Range of host ports (begin-end or begin+offset, inclusive) the userspace mode may use for proxy sockets. Empty: chosen by the kernel.")
	fs.DurationVar(&fv.UDPIdleTimeout.Duration, "udp-timeout", fv.UDPIdleTimeout.Duration, "How long an idle UDP flow is kept open (userspace mode). Must be greater than 0.")
	fs.StringVar(&fv.HealthzBindAddress, "healthz-bind-address", fv.HealthzBindAddress, "The IP:port the health check server serves /healthz and /livez on. Empty: disabled.")
	fs.StringVar(&fv.MetricsBindAddress, "metrics-bind-address", fv.MetricsBindAddress, "The IP:port the metrics server serves /metrics and /proxyMode on. Empty: disabled.")
	fs.DurationVar(&fv.ConfigSyncPeriod.Duration, "config-sync-period", fv.ConfigSyncPeriod.Duration, "How often configuration from the API server is refreshed (the informers' resync period). Must be greater than 0.")
	fs.StringVar(&fv.DetectLocalMode, "detect-local-mode", "", "How to tell local traffic from external: ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix.")
	fs.StringVar(&fv.DetectLocal.BridgeInterface, "pod-bridge-interface", "", "The bridge interface pods attach to, for --detect-local-mode=BridgeInterface.")
	fs.StringVar(&fv.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", "", "The prefix of pod interface names, for --detect-local-mode=InterfaceNamePrefix.")
	fs.BoolVar(&o.cleanup, "cleanup", false, "Remove what any proxy mode (ours or kube-proxy's) left on the node, then exit 0.")
	fs.IntVar(&fv.Logging.Verbosity, "v", 0, "Log verbosity.")
	fs.StringVar(&o.objectsFile, "objects-file", "", "Read Services, EndpointSlices, Endpoints and the Node from this YAML/JSON file instead of an API server (re-read when it changes).")
	fs.BoolVar(&o.legacyRestoreTool, "iptables-legacy-restore-tool", false, "With iptables-legacy, run iptables-legacy-restore for every restore instead of writing the tables from this process. The in-process writer (on by default for the iptables and kernel versions it was verified with; SVCPROXY_IPTABLES_LEGACY_IN_PROCESS=0 or 1 overrides) leaves anything it does not write to the tool, reads back its first write and every full sync's, and switches itself off when the tool takes what it was refused or the read-back differs. For the iptables, ipvs and userspace modes, and --cleanup.")
	fs.BoolVar(&nftablesNetlink, "nftables-netlink", true, "In the nftables mode, send the transactions the netlink encoder knows as netlink batches instead of through nft. On by default for the nft and kernel versions it was verified with (SVCPROXY_NFTABLES_NETLINK=0 or 1 overrides); a batch the kernel refuses is written again through nft, the first batch and every full sync's are read back with nft, and the writer switches itself off after 3 refusals nft took or a read-back that differs. false: nft writes everything.")
	fs.BoolVar(&o.dryRun, "dry-run", false, "Print what the proxy mode would program (iptables-restore text, IPVS and ipset operations) and exit 0 without touching the node.")
	fs.StringSliceVar(&exclude, "exclude-cluster-cidr", nil, "Endpoint CIDRs (comma-separated) of another pod network whose services this proxy leaves alone.")
	fs.StringVar(&o.serviceProxyName, "service-proxy-name", "", "Handle the services labelled service.kubernetes.io/service-proxy-name=<this> (and no unlabelled ones).")

	// The rest of kube-proxy v1.34's flags, with its meanings.
	fs.StringVar(&o.writeConfigTo, "write-config-to", "", "If set, write the effective configuration (defaults, --config, then flags) to this file as a KubeProxyConfiguration and exit.")
	fs.BoolVar(&o.initOnly, "init-only", false, "If true, apply the node settings that need full root privileges (conntrack sysctls, OOM score, and in the iptables mode route_localnet for localhost node ports), then exit. After that the proxy needs only CAP_NET_ADMIN.")
	fs.Var(&o.version, "version", "--version, --version=raw prints version information and quits; --version=false does nothing.")
	fs.Lookup("version").NoOptDefVal = "true"
	fs.Var(featureGatesFlag{&fv.FeatureGates}, "feature-gates", "A set of key=value pairs for kube-proxy v1.34's feature gates, plus v1.37's KubeProxyNFTablesLocalhostNodePorts. Every gate kube-proxy knows is accepted (locked gates only at their locked value); only KubeProxyNFTablesLocalhostNodePorts (nftables mode: localhost node ports, off by default) changes svcproxy's behaviour, and other gates set away from their default are logged once.")
	fs.Float32Var(&fv.ClientConnection.QPS, "kube-api-qps", fv.ClientConnection.QPS, "QPS to use while talking with the Kubernetes API server.")
	fs.Int32Var(&fv.ClientConnection.Burst, "kube-api-burst", fv.ClientConnection.Burst, "Burst to use while talking with the Kubernetes API server.")
	fs.StringVar(&fv.ClientConnection.ContentType, "kube-api-content-type", fv.ClientConnection.ContentType, "Content type of requests sent to the API server.")
	fs.BoolVar(&fv.BindAddressHardFail, "bind-address-hard-fail", false, "If true, failing to listen on the healthz or metrics address is fatal.")
	fs.BoolVar(&fv.EnableProfiling, "profiling", false, "If true, serve /debug/pprof/ on the metrics address.")
	fs.StringVar(&fv.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", "", "The previous minor version (\"1.33\") for which to show hidden metrics; svcproxy hides none, so it only validates the value.")
	fs.Int32Var(fv.OOMScoreAdj, "oom-score-adj", *fv.OOMScoreAdj, "The oom_score_adj value for this process, within [-1000, 1000].")
	fs.BoolVar(fv.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", *fv.IPTables.LocalhostNodePorts, "If false, NodePort services are not reachable via localhost (iptables mode, IPv4).")
	fs.DurationVar(&fv.IPVS.TCPTimeout.Duration, "ipvs-tcp-timeout", 0, "The timeout for idle IPVS TCP connections, 0 to leave as is (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&fv.IPVS.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", 0, "The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as is.")
	fs.DurationVar(&fv.IPVS.UDPTimeout.Duration, "ipvs-udp-timeout", 0, "The timeout for IPVS UDP packets, 0 to leave as is.")
	fs.Int32Var(fv.Conntrack.MaxPerCore, "conntrack-max-per-core", *fv.Conntrack.MaxPerCore, "Maximum number of NAT connections to track per CPU core (0 to leave the limit as is and ignore conntrack-min).")
	fs.Int32Var(fv.Conntrack.Min, "conntrack-min", *fv.Conntrack.Min, "Minimum number of conntrack entries to allocate, regardless of conntrack-max-per-core (set conntrack-max-per-core=0 to leave the limit as is).")
	fs.DurationVar(&fv.Conntrack.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", fv.Conntrack.TCPEstablishedTimeout.Duration, "Idle timeout for established TCP connections (0 to leave as is).")
	fs.DurationVar(&fv.Conntrack.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", fv.Conntrack.TCPCloseWaitTimeout.Duration, "NAT timeout for TCP connections in the CLOSE_WAIT state (0 to leave as is).")
	fs.BoolVar(&fv.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", false, "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal to 1.")
	fs.DurationVar(&fv.Conntrack.UDPTimeout.Duration, "conntrack-udp-timeout", 0, "Idle timeout for UNREPLIED UDP connections (0 to leave as is).")
	fs.DurationVar(&fv.Conntrack.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", 0, "Idle timeout for ASSURED UDP connections (0 to leave as is).")
	fs.StringVar(&fv.Logging.Format, "logging-format", fv.Logging.Format, "Sets the log format: \"text\" (key/value pairs) or \"json\".")
	fs.Var(vmoduleFlag{&fv.Logging.VModule}, "vmodule", "Comma-separated pattern=N settings for file-filtered logging; accepted, but verbosity here is one --v for the whole process.")
	fs.DurationVar(&fv.Logging.FlushFrequency.Duration, "log-flush-frequency", fv.Logging.FlushFrequency.Duration, "Maximum number of seconds between log flushes; lines are written unbuffered here, so it has no effect.")
	fs.BoolVar(&fv.Logging.Options.Text.SplitStream, "log-text-split-stream", false, "[Alpha] In text format, write error messages to stderr and info messages to stdout.")
	fs.Var(quantityFlag{&fv.Logging.Options.Text.InfoBufferSize}, "log-text-info-buffer-size", "[Alpha] In text format with split output streams, the size of the info buffer; accepted, lines are not buffered here.")
	fs.BoolVar(&fv.Logging.Options.JSON.SplitStream, "log-json-split-stream", false, "[Alpha] In JSON format, write error messages to stderr and info messages to stdout.")
	fs.Var(quantityFlag{&fv.Logging.Options.JSON.InfoBufferSize}, "log-json-info-buffer-size", "[Alpha] In JSON format with split output streams, the size of the info buffer; accepted, lines are not buffered here.")
	var bootIDFile, machineIDFile string
	fs.StringVar(&bootIDFile, "boot-id-file", "", "Accepted for kube-proxy compatibility; no effect here.")
	fs.StringVar(&machineIDFile, "machine-id-file", "", "Accepted for kube-proxy compatibility; no effect here.")

	// Deprecated aliases from the older kube-proxy flag table; each prints
	// a one-line deprecation warning when used.
	var healthzPort, metricsPort int32
	var alsoLogToStderr, logToStderr bool
	var logDir string
	fs.BoolVar(&o.cleanup, "cleanup-iptables", false, "Deprecated alias of --cleanup.")
	fs.Int32Var(&healthzPort, "healthz-port", 10256, "The port of the health check server (0 disables it).")
	fs.Int32Var(&metricsPort, "metrics-port", 10249, "The port of the metrics server (0 disables it).")
	fs.BoolVar(&alsoLogToStderr, "alsologtostderr", false, "Logs go to stderr in any case.")
	fs.BoolVar(&logToStderr, "logtostderr", true, "Logs go to stderr in any case.")
	fs.StringVar(&logDir, "log-dir", "", "Ignored: logs go to stderr (the container runtime or journald keeps them).")
	for name, msg := range map[string]string{
		"cleanup-iptables": "use --cleanup instead",
		"healthz-port":     "use --healthz-bind-address instead",
		"metrics-port":     "use --metrics-bind-address instead",
		"alsologtostderr":  "logs always go to stderr",
		"logtostderr":      "logs always go to stderr",
		"log-dir":          "it is ignored: logs go to stderr",
	} {
		_ = fs.MarkDeprecated(name, msg)
	}

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: minimal-proxy takes only flags", fs.Args())
	}
	fv.IPTables.MasqueradeBit = &masqBit
	o.nftOnly = !nftablesNetlink
	if o.version == "true" || o.version == "raw" {
		return o, nil
	}
	// The deprecated ports replace the port of the bind addresses (0
	// disables the server), as kube-proxy's healthz-port and metrics-port.
	if fs.Changed("healthz-port") {
		fv.HealthzBindAddress = addressWithPort(fv.HealthzBindAddress, healthzPort)
	}
	if fs.Changed("metrics-port") {
		fv.MetricsBindAddress = addressWithPort(fv.MetricsBindAddress, metricsPort)
	}
	for _, name := range []string{"boot-id-file", "machine-id-file", "log-flush-frequency"} {
		if fs.Changed(name) {
			o.noEffect = append(o.noEffect, "--"+name)
		}
	}

	cfg := fv
	if o.configFile != "" {
		fileCfg, err := loadConfigFile(o.configFile)
		if err != nil {
			return nil, err
		}
		fs.Visit(func(f *pflag.Flag) {
			name := f.Name
			if alias, ok := deprecatedFlagAliases[name]; ok {
				name = alias
			}
			if apply, ok := flagOverrides[name]; ok {
				apply(fileCfg, fv)
			}
		})
		cfg = fileCfg
	}
	o.config = cfg
	o.noEffect = append(o.noEffect, settingsWithoutEffect(cfg)...)
	o.localhostNodePortsSet = fs.Changed("iptables-localhost-nodeports") ||
		(cfg.IPTables.LocalhostNodePorts != nil && !*cfg.IPTables.LocalhostNodePorts)

	var errs []error
	if err := validateConfig(cfg, goos, o.dryRun); err != nil {
		errs = append(errs, err)
	}
	for _, c := range exclude {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			errs = append(errs, fmt.Errorf("--exclude-cluster-cidr: not a CIDR: %q", c))
			continue
		}
		o.excludeClusterCIDRs = append(o.excludeClusterCIDRs, p.Masked())
	}
	if _, err := informers.LabelSelector(o.serviceProxyName); err != nil {
		errs = append(errs, fmt.Errorf("--service-proxy-name: %w", err))
	}
	if o.objectsFile != "" && (o.master != "" || cfg.ClientConnection.Kubeconfig != "") {
		errs = append(errs, errors.New("--objects-file: reads objects from a file instead of an API server, so it cannot be combined with --kubeconfig/--master (or clientConnection.kubeconfig)"))
	}
	if o.cleanup && o.dryRun {
		errs = append(errs, errors.New("--cleanup and --dry-run: contradictory; --cleanup changes the node, --dry-run promises not to"))
	}
	if o.cleanup && o.objectsFile != "" {
		errs = append(errs, errors.New("--cleanup and --objects-file: --cleanup reads no objects; drop one of them"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}
