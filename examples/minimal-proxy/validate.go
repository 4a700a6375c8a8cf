package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Proxy modes, as kube-proxy spells them.
const (
	modeUserspace   = "userspace"
	modeIPTables    = "iptables"
	modeIPVS        = "ipvs"
	modeNFTables    = "nftables"
	modeKernelspace = "kernelspace"
	// modeWinkernelAlias is accepted for kernelspace (the engine's name).
	modeWinkernelAlias = "winkernel"
)

// Local-traffic detection modes (detectLocalMode).
const (
	detectClusterCIDR         = "ClusterCIDR"
	detectNodeCIDR            = "NodeCIDR"
	detectBridgeInterface     = "BridgeInterface"
	detectInterfaceNamePrefix = "InterfaceNamePrefix"
)

// ipvsSchedulers are the schedulers the Linux IPVS code knows.
var ipvsSchedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}

// validateConfig checks the merged configuration (file, then flags) and
// returns every problem at once, each naming the setting as the
// configuration file spells it. goos is the target OS (runtime.GOOS);
// dryRun allows the Windows mode anywhere (its dry run runs over
// winkerneltest's fake HNS).
func validateConfig(cfg *KubeProxyConfiguration, goos string, dryRun bool) error {
	var errs []error
	bad := func(field string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	if cfg.Mode == modeWinkernelAlias {
		cfg.Mode = modeKernelspace
	}
	switch cfg.Mode {
	case "", modeIPTables, modeIPVS, modeNFTables, modeUserspace:
		if goos == "windows" && cfg.Mode != "" {
			bad("mode", "%q is not available on Windows; use %q", cfg.Mode, modeKernelspace)
		}
	case modeKernelspace:
		if goos != "windows" && !dryRun {
			bad("mode", "%q is the Windows HNS mode and is not available on %s; use %q, %q or %q", cfg.Mode, goos, modeIPTables, modeIPVS, modeUserspace)
		}
	default:
		bad("mode", "unknown proxy mode %q; want one of %s, %s, %s, %s, %s", cfg.Mode, modeUserspace, modeIPTables, modeIPVS, modeNFTables, modeKernelspace)
	}

	if err := validateFeatureGates(cfg.FeatureGates); err != nil {
		bad("featureGates", "%v", err)
	}

	cc := cfg.ClientConnection
	if cc.QPS < 0 {
		bad("clientConnection.qps", "must not be negative, got %v", cc.QPS)
	}
	if cc.Burst < 0 {
		bad("clientConnection.burst", "must not be negative, got %d", cc.Burst)
	}

	switch cfg.Logging.Format {
	case "", "text", "json":
	default:
		bad("logging.format", "want \"text\" or \"json\", got %q", cfg.Logging.Format)
	}
	if cfg.Logging.FlushFrequency.Duration < 0 {
		bad("logging.flushFrequency", "must not be negative, got %v", cfg.Logging.FlushFrequency.Duration)
	}
	for i, v := range cfg.Logging.VModule {
		if v.FilePattern == "" || v.Verbosity < 0 {
			bad(fmt.Sprintf("logging.vmodule[%d]", i), "want a file pattern and a verbosity of 0 or more, got %q=%d", v.FilePattern, v.Verbosity)
		}
	}
	if v := cfg.ShowHiddenMetricsForVersion; v != "" && v != previousKubernetesMinor() {
		bad("showHiddenMetricsForVersion", "only the previous minor version, %s, is allowed, got %q", previousKubernetesMinor(), v)
	}
	if cfg.Logging.Verbosity < 0 {
		bad("logging.verbosity", "must not be negative, got %d", cfg.Logging.Verbosity)
	}

	if cfg.BindAddress != "" {
		if _, err := netip.ParseAddr(cfg.BindAddress); err != nil {
			bad("bindAddress", "not an IP address: %q", cfg.BindAddress)
		}
	}
	if err := validateHostPort(cfg.HealthzBindAddress); err != nil {
		bad("healthzBindAddress", "%v", err)
	}
	if err := validateHostPort(cfg.MetricsBindAddress); err != nil {
		bad("metricsBindAddress", "%v", err)
	}

	if b := cfg.IPTables.MasqueradeBit; b != nil && (*b < 0 || *b > 31) {
		bad("iptables.masqueradeBit", "must be within 0..31, got %d", *b)
	}
	validatePeriods(bad, "iptables", cfg.IPTables.SyncPeriod.Duration, cfg.IPTables.MinSyncPeriod.Duration)
	if cfg.Mode == modeNFTables {
		validatePeriods(bad, "nftables", cfg.NFTables.SyncPeriod.Duration, cfg.NFTables.MinSyncPeriod.Duration)
	}
	if cfg.Mode == modeIPVS {
		validatePeriods(bad, "ipvs", cfg.IPVS.SyncPeriod.Duration, cfg.IPVS.MinSyncPeriod.Duration)
	}
	if s := cfg.IPVS.Scheduler; s != "" && !contains(ipvsSchedulers, s) {
		bad("ipvs.scheduler", "unknown scheduler %q; want one of %s", s, strings.Join(ipvsSchedulers, ", "))
	}
	for i, c := range cfg.IPVS.ExcludeCIDRs {
		if _, err := netip.ParsePrefix(strings.TrimSpace(c)); err != nil {
			bad(fmt.Sprintf("ipvs.excludeCIDRs[%d]", i), "not a CIDR: %q", c)
		}
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"ipvs.tcpTimeout", cfg.IPVS.TCPTimeout.Duration},
		{"ipvs.tcpFinTimeout", cfg.IPVS.TCPFinTimeout.Duration},
		{"ipvs.udpTimeout", cfg.IPVS.UDPTimeout.Duration},
	} {
		if t.d < 0 {
			bad(t.name, "must not be negative, got %v", t.d)
		}
	}

	if _, err := parseCIDRList(cfg.ClusterCIDR); err != nil {
		bad("clusterCIDR", "%v", err)
	}
	switch cfg.DetectLocalMode {
	case "", detectClusterCIDR, detectNodeCIDR:
	case detectBridgeInterface:
		if cfg.DetectLocal.BridgeInterface == "" {
			bad("detectLocal.bridgeInterface", "required when detectLocalMode is %s", detectBridgeInterface)
		}
	case detectInterfaceNamePrefix:
		if cfg.DetectLocal.InterfaceNamePrefix == "" {
			bad("detectLocal.interfaceNamePrefix", "required when detectLocalMode is %s", detectInterfaceNamePrefix)
		}
	default:
		bad("detectLocalMode", "unknown mode %q; want %s, %s, %s or %s", cfg.DetectLocalMode,
			detectClusterCIDR, detectNodeCIDR, detectBridgeInterface, detectInterfaceNamePrefix)
	}

	for i, a := range cfg.NodePortAddresses {
		if a == "primary" {
			if len(cfg.NodePortAddresses) != 1 {
				bad(fmt.Sprintf("nodePortAddresses[%d]", i), "%q must be the only entry", a)
			}
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			bad(fmt.Sprintf("nodePortAddresses[%d]", i), "not a CIDR (or \"primary\"): %q", a)
		}
	}

	if v := cfg.OOMScoreAdj; v != nil && (*v < -1000 || *v > 1000) {
		bad("oomScoreAdj", "must be within -1000..1000, got %d", *v)
	}
	ct := cfg.Conntrack
	if ct.MaxPerCore != nil && *ct.MaxPerCore < 0 {
		bad("conntrack.maxPerCore", "must not be negative, got %d", *ct.MaxPerCore)
	}
	if ct.Min != nil && *ct.Min < 0 {
		bad("conntrack.min", "must not be negative, got %d", *ct.Min)
	}
	if d := ct.TCPEstablishedTimeout; d != nil && d.Duration < 0 {
		bad("conntrack.tcpEstablishedTimeout", "must not be negative, got %v", d.Duration)
	}
	if d := ct.TCPCloseWaitTimeout; d != nil && d.Duration < 0 {
		bad("conntrack.tcpCloseWaitTimeout", "must not be negative, got %v", d.Duration)
	}
	if ct.UDPTimeout.Duration < 0 {
		bad("conntrack.udpTimeout", "must not be negative, got %v", ct.UDPTimeout.Duration)
	}
	if ct.UDPStreamTimeout.Duration < 0 {
		bad("conntrack.udpStreamTimeout", "must not be negative, got %v", ct.UDPStreamTimeout.Duration)
	}

	if cfg.ConfigSyncPeriod.Duration <= 0 {
		bad("configSyncPeriod", "must be positive, got %v", cfg.ConfigSyncPeriod.Duration)
	}
	if _, _, err := parsePortRange(cfg.PortRange); err != nil {
		bad("portRange", "%v", err)
	}
	if cfg.UDPIdleTimeout.Duration <= 0 {
		bad("udpIdleTimeout", "must be positive, got %v", cfg.UDPIdleTimeout.Duration)
	}
	return errors.Join(errs...)
}

// previousKubernetesMinor is "1.33" when we follow v1.34.
func previousKubernetesMinor() string {
	minor, _ := strconv.Atoi(strings.TrimPrefix(followedKubernetes, "v1."))
	return fmt.Sprintf("1.%d", minor-1)
}

func validatePeriods(bad func(string, string, ...any), section string, sync, minSync time.Duration) {
	if sync <= 0 {
		bad(section+".syncPeriod", "must be positive, got %v", sync)
	}
	if minSync < 0 {
		bad(section+".minSyncPeriod", "must not be negative, got %v", minSync)
	}
	if sync > 0 && minSync > sync {
		bad(section+".minSyncPeriod", "%v is longer than %s.syncPeriod %v", minSync, section, sync)
	}
}

// validateHostPort accepts "" (server disabled) or "IP:port".
func validateHostPort(s string) error {
	if s == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want IP:port, got %q", s)
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("%q: host %q is not an IP address", s, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not within 0..65535", s, port)
	}
	return nil
}

// parseCIDRList parses a comma-separated list of CIDRs with at most one per
// IP family (kube-proxy's --cluster-cidr). "" is an empty list.
func parseCIDRList(s string) ([]netip.Prefix, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	seen := map[bool]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("not a CIDR: %q", part)
		}
		if prev, dup := seen[p.Addr().Is4()]; dup {
			return nil, fmt.Errorf("two CIDRs of one IP family: %q and %q", prev, part)
		}
		seen[p.Addr().Is4()] = part
		out = append(out, p.Masked())
	}
	return out, nil
}

// parsePortRange parses kube-proxy's port range: "" (none), "begin-end" or
// "begin+offset", within 1..65535.
func parsePortRange(s string) (begin, end int, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, 0, nil
	}
	malformed := fmt.Errorf("%q is not \"begin-end\" or \"begin+offset\" within 1..65535", s)
	var a, b string
	var plus bool
	if i := strings.IndexAny(s, "-+"); i > 0 {
		a, b, plus = s[:i], s[i+1:], s[i] == '+'
	} else {
		return 0, 0, malformed
	}
	begin, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 0 {
		return 0, 0, malformed
	}
	end = n
	if plus {
		end = begin + n
	}
	if begin < 1 || end > 65535 || end < begin {
		return 0, 0, malformed
	}
	return begin, end, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
