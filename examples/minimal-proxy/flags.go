package main

// Flags use github.com/spf13/pflag (already in the module through
// client-go) because kube-proxy's flags are pflag flags: "--flag=value",
// comma-separated lists, and durations as "30s" behave the same here.

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

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
	// excludeClusterCIDRs are endpoint CIDRs this proxy leaves to another
	// proxy on the node (multi-network); serviceProxyName is the value of
	// service.kubernetes.io/service-proxy-name this proxy owns.
	excludeClusterCIDRs []netip.Prefix
	serviceProxyName    string
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
	"v": func(d, f *KubeProxyConfiguration) { d.Logging.Verbosity = f.Logging.Verbosity },
}

// parseOptions parses args (without the program name), loads --config,
// applies explicit flags over it and validates the result for goos.
// Usage and flag errors are written to stderr.
func parseOptions(args []string, goos string, stderr io.Writer) (*options, error) {
	o := &options{}
	fv := defaultConfig() // flags bind here
	var masqBit int32 = *fv.IPTables.MasqueradeBit
	var exclude []string

	fs := pflag.NewFlagSet("minimal-proxy", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: minimal-proxy [flags]\n\nThe svcproxy reference service proxy: kube-proxy's flags and configuration file.\n\nFlags:\n")
		fs.PrintDefaults()
	}

	fs.StringVar(&o.configFile, "config", "", "The path to a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file. Flags given on the command line override its values.")
	fs.StringVar(&fv.ClientConnection.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file with authorization information (the API server is taken from --master when set). Empty: in-cluster configuration.")
	fs.StringVar(&o.master, "master", "", "The address of the Kubernetes API server (overrides any value in the kubeconfig).")
	fs.StringVar(&fv.Mode, "proxy-mode", "", "Which proxy mode to use: 'iptables' (default on Linux), 'ipvs' (falls back to iptables without kernel IPVS), 'userspace' (also the fallback when iptables is missing or too old), or 'kernelspace' (Windows).")
	fs.StringVar(&fv.HostnameOverride, "hostname-override", "", "If non-empty, will be used as the name of the Node this proxy runs on instead of the hostname.")
	fs.StringVar(&fv.BindAddress, "bind-address", fv.BindAddress, "The IP address the userspace mode's proxy sockets bind (0.0.0.0 for all IPv4 interfaces, :: for all IPv6).")
	fs.StringVar(&fv.ClusterCIDR, "cluster-cidr", "", "The CIDR range(s) of the pods in the cluster (comma-separated, at most one per IP family). Traffic from outside it to a service IP is masqueraded.")
	fs.BoolVar(&fv.IPTables.MasqueradeAll, "masquerade-all", false, "SNAT all traffic sent via service cluster IPs (iptables and ipvs modes).")
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
	fs.BoolVar(&o.dryRun, "dry-run", false, "Print what the proxy mode would program (iptables-restore text, IPVS and ipset operations) and exit 0 without touching the node.")
	fs.StringSliceVar(&exclude, "exclude-cluster-cidr", nil, "Endpoint CIDRs (comma-separated) of another pod network whose services this proxy leaves alone.")
	fs.StringVar(&o.serviceProxyName, "service-proxy-name", "", "Handle the services labelled service.kubernetes.io/service-proxy-name=<this> (and no unlabelled ones).")

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: minimal-proxy takes only flags", fs.Args())
	}
	fv.IPTables.MasqueradeBit = &masqBit

	cfg := fv
	if o.configFile != "" {
		fileCfg, err := loadConfigFile(o.configFile)
		if err != nil {
			return nil, err
		}
		fs.Visit(func(f *pflag.Flag) {
			if apply, ok := flagOverrides[f.Name]; ok {
				apply(fileCfg, fv)
			}
		})
		cfg = fileCfg
	}
	o.config = cfg

	var errs []error
	if err := validateConfig(cfg, goos); err != nil {
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
