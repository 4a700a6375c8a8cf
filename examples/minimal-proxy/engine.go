package main

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// engine is one proxy mode built for this node: the engines' shared
// surface (engine.Proxier: handlers, Sync, Run, DryRun, Cleanup, Close,
// Stats), plus what the binary made for it.
type engine struct {
	mode    string
	proxier enginebase.Proxier
	// svcHealth are the health-check node-port servers made for it.
	svcHealth []*healthcheck.ServiceHealthServer
}

// close releases the engine (sockets, handles) and its health servers.
func (e *engine) close() {
	_ = e.proxier.Close()
	for _, s := range e.svcHealth {
		_ = s.Close()
	}
}

// newEngine wraps a built proxier; svcHealth may be nil.
func newEngine(mode string, p enginebase.Proxier, svcHealth *healthcheck.ServiceHealthServer) *engine {
	e := &engine{mode: mode, proxier: p}
	if svcHealth != nil {
		e.svcHealth = append(e.svcHealth, svcHealth)
	}
	return e
}

// engineParams is everything buildEngine needs.
type engineParams struct {
	mode     string
	opts     *options
	nodeName string
	nodeIPs  []netip.Addr
	// node is this node's Node object, nil when unknown.
	node    *v1.Node
	metrics *metrics.Metrics
	health  *healthcheck.ProxyHealthServer // nil in a dry run
	log     logr.Logger
	// dryRun builds the engine over in-memory fakes that record what it
	// would do, so nothing on the node is read or changed.
	dryRun bool
	// dualStack: one engine per family is being built.
	dualStack bool
}

// nodeFamilies are the IP families of the node IPs, primary first (IPv4
// alone when there are none).
func nodeFamilies(nodeIPs []netip.Addr) []v1.IPFamily {
	out := []v1.IPFamily{primaryFamily(nodeIPs)}
	for _, ip := range nodeIPs {
		if f := familyOf(ip); f != out[0] {
			return append(out, f)
		}
	}
	return out
}

func familyOf(ip netip.Addr) v1.IPFamily {
	if ip.Unmap().Is4() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// ipsOf keeps the addresses of family.
func ipsOf(ips []netip.Addr, family v1.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		if familyOf(ip) == family {
			out = append(out, ip)
		}
	}
	return out
}

// dualStack combines the engines of two families.
func dualStack(a, b *engine, families []v1.IPFamily) *engine {
	v4, v6 := a, b
	if families[0] == v1.IPv6Protocol {
		v4, v6 = b, a
	}
	p, err := enginebase.NewDualStack(v4.proxier, v6.proxier)
	if err != nil {
		panic(err) // both engines were just built for their own family
	}
	return &engine{mode: a.mode, proxier: p, svcHealth: append(a.svcHealth, b.svcHealth...)}
}

// primaryFamily is the family of the first node IP (IPv4 when unknown).
func primaryFamily(nodeIPs []netip.Addr) v1.IPFamily {
	if len(nodeIPs) > 0 && nodeIPs[0].Is6() {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// buildEngine constructs the engine of p.mode: one per IP family of the
// node IPs in the iptables, ipvs and kernelspace modes (dual stack), the
// primary family's in the userspace mode.
func buildEngine(ctx context.Context, p engineParams) (*engine, error) {
	var build func(engineParams, v1.IPFamily) (*engine, error)
	switch p.mode {
	case modeIPTables:
		build = buildIPTables
	case modeIPVS:
		build = buildIPVS
	case modeNFTables:
		build = buildNFTables
	case modeUserspace:
		return buildUserspace(p, primaryFamily(p.nodeIPs))
	case modeKernelspace:
		build = buildWinkernel
	default:
		return nil, fmt.Errorf("proxy mode %q is not available on %s", p.mode, runtime.GOOS)
	}
	noteLocalhostNodePortsIgnored(p)
	families := nodeFamilies(p.nodeIPs)
	p.dualStack = len(families) == 2
	primary, err := build(p, families[0])
	if err != nil || len(families) == 1 {
		return primary, err
	}
	// Dual stack: one engine per family, every event handed to both.
	secondary, err := build(p, families[1])
	if err != nil {
		primary.close()
		return nil, fmt.Errorf("%s (the node's second IP family): %w", families[1], err)
	}
	return dualStack(primary, secondary, families), nil
}

// noteLocalhostNodePorts logs, once, that iptables.localhostNodePorts
// (--iptables-localhost-nodeports) was set for a mode that ignores it, as
// kube-proxy's do: ipvs and nftables (which never serves node ports on
// loopback), and the other non-iptables modes.
func noteLocalhostNodePortsIgnored(p engineParams) {
	if p.mode == modeIPTables || p.opts == nil || !p.opts.localhostNodePortsSet {
		return
	}
	v := p.opts.config.IPTables.LocalhostNodePorts
	p.log.Info("iptables.localhostNodePorts (--iptables-localhost-nodeports) has no effect in this proxy mode", "mode", p.mode, "localhostNodePorts", v == nil || *v)
}

// buildIPTables builds the iptables engine: over the real iptables, or
// over iptablestest.Fake for a dry run.
func buildIPTables(p engineParams, family v1.IPFamily) (*engine, error) {
	cfg := p.opts.config
	detector, err := localDetector(cfg, family, p.node)
	if err != nil {
		return nil, err
	}
	npa, err := nodePortAddresses(cfg.NodePortAddresses, p.nodeIPs)
	if err != nil {
		return nil, err
	}
	icfg := iptables.Config{
		Common: commonConfig(p, family, "iptables", cfg.IPTables.SyncPeriod.Duration, cfg.IPTables.MinSyncPeriod.Duration),
		Netfilter: enginebase.Netfilter{
			MasqueradeAll:     cfg.IPTables.MasqueradeAll,
			MasqueradeBit:     masqBit(cfg.IPTables.MasqueradeBit),
			LocalDetector:     detector,
			NodePortAddresses: npa,
		},
		// kube-proxy's iptables.localhostNodePorts (default true).
		LocalhostNodePorts: cfg.IPTables.LocalhostNodePorts == nil || *cfg.IPTables.LocalhostNodePorts,
	}
	ifs := iptables.Interfaces{}
	var runner xtables.Runner
	var svcHealth *healthcheck.ServiceHealthServer
	if p.dryRun {
		// The node's own addresses, not the host's: the plan then depends
		// only on the objects.
		ips := ipsOf(p.nodeIPs, family)
		icfg.LocalAddresses = func() ([]netip.Addr, error) { return ips, nil }
		runner = newDryRunRunner(family)
		ifs.Sysctl = dryRunSysctl{}
	} else {
		icfg.HealthServer = p.health
		if svcHealth = newServiceHealth(p, npa, family); svcHealth != nil {
			icfg.ServiceHealthServer = svcHealth
		}
		icfg.Conntrack = conntrack.New()
		runner, err = p.newRunner(family)
		if err != nil {
			return nil, err
		}
	}
	ifs.IPTables = runner
	proxier, err := iptables.NewProxier(icfg, ifs)
	if err != nil {
		return nil, err
	}
	return newEngine(modeIPTables, proxier, svcHealth), nil
}

// commonConfig is the part of every engine's configuration that the engine
// base owns, the same in every mode: name names the engine's logger, and
// syncPeriod and minSyncPeriod come from the mode's section of the
// KubeProxyConfiguration.
// runnerConfig configures the iptables Runner of a mode that writes
// iptables rules.
// The in-process writer's hand-offs and switch-off are counted in the
// fast-writer metrics (newRunner sets whether it is active).
func (p engineParams) runnerConfig(family v1.IPFamily) xtables.RunnerConfig {
	m := p.metrics
	return xtables.RunnerConfig{Family: family, Logger: p.log.WithName("iptables-runner"),
		LegacyTool: p.opts != nil && p.opts.legacyRestoreTool,
		OnHandedToTool: func(reason string) {
			m.IncFastWriterHandedToTool(family, metrics.WriterLegacyInProcess, reason)
		},
		OnInProcessOff: func(reason string) {
			m.IncFastWriterSwitchedOff(family, metrics.WriterLegacyInProcess, reason)
		},
	}
}

// newRunner is xtables.New(p.runnerConfig(family)), recording in the
// metrics whether the legacy Runner writes in process.
func (p engineParams) newRunner(family v1.IPFamily) (xtables.Runner, error) {
	r, err := xtables.New(p.runnerConfig(family))
	if err != nil {
		return nil, err
	}
	if c := r.Capabilities(); c.Backend == xtables.BackendLegacy {
		p.metrics.SetFastWriterActive(family, metrics.WriterLegacyInProcess, c.InProcess)
	}
	return r, nil
}

func commonConfig(p engineParams, family v1.IPFamily, name string, syncPeriod, minSyncPeriod time.Duration) enginebase.Common {
	return enginebase.Common{
		IPFamily:         family,
		NodeName:         p.nodeName,
		NodeIPs:          p.nodeIPs,
		SyncPeriod:       syncPeriod,
		MinSyncPeriod:    minSync(minSyncPeriod),
		ServiceProxyName: p.opts.serviceProxyName,
		EndpointFilter:   proxy.EndpointFilter{ExcludeCIDRs: p.opts.excludeClusterCIDRs},
		Logger:           p.log.WithName(name),
		Metrics:          p.metrics,
	}
}

// minSync maps kube-proxy's minSyncPeriod (0: no limit) to the engines'
// convention (0: default; negative: no limit).
func minSync(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// masqBit maps kube-proxy's masqueradeBit to iptables.Config's (0 there
// means the default 14; -1 means bit 0).
func masqBit(b *int32) int {
	if b == nil {
		return 0
	}
	if *b == 0 {
		return -1
	}
	return int(*b)
}

// localDetector turns detectLocalMode into the engine's detector for family.
func localDetector(cfg *KubeProxyConfiguration, family v1.IPFamily, node *v1.Node) (proxy.LocalDetector, error) {
	mode := cfg.DetectLocalMode
	if mode == "" {
		mode = detectClusterCIDR
	}
	switch mode {
	case detectClusterCIDR:
		cidrs, err := parseCIDRList(cfg.ClusterCIDR)
		if err != nil {
			return proxy.LocalDetector{}, fmt.Errorf("clusterCIDR: %w", err)
		}
		for _, c := range cidrs {
			if c.Addr().Is4() == (family == v1.IPv4Protocol) {
				return proxy.LocalDetector{Mode: proxy.LocalModeClusterCIDR, CIDR: c}, nil
			}
		}
		// As kube-proxy: no cluster CIDR of this family, no detection.
		return proxy.LocalDetector{}, nil
	case detectNodeCIDR:
		if node == nil {
			return proxy.LocalDetector{}, fmt.Errorf("detectLocalMode: %s needs this node's Node object (its spec.podCIDRs), and there is none", detectNodeCIDR)
		}
		cidrs := node.Spec.PodCIDRs
		if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
			cidrs = []string{node.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				return proxy.LocalDetector{}, fmt.Errorf("detectLocalMode %s: Node %s has an unparsable podCIDR %q", detectNodeCIDR, node.Name, c)
			}
			if pfx.Addr().Is4() == (family == v1.IPv4Protocol) {
				return proxy.LocalDetector{Mode: proxy.LocalModeNodeCIDR, CIDR: pfx.Masked()}, nil
			}
		}
		return proxy.LocalDetector{}, fmt.Errorf("detectLocalMode %s: Node %s has no %s podCIDR (spec.podCIDRs %v)", detectNodeCIDR, node.Name, family, cidrs)
	case detectBridgeInterface:
		return proxy.LocalDetector{Mode: proxy.LocalModeBridgeInterface, Interface: cfg.DetectLocal.BridgeInterface}, nil
	case detectInterfaceNamePrefix:
		return proxy.LocalDetector{Mode: proxy.LocalModeInterfaceNamePrefix, Interface: cfg.DetectLocal.InterfaceNamePrefix}, nil
	}
	return proxy.LocalDetector{}, fmt.Errorf("detectLocalMode: unknown mode %q", mode)
}

// nodePortAddresses parses nodePortAddresses; "primary" means the node IPs.
func nodePortAddresses(list []string, nodeIPs []netip.Addr) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s == "primary" {
			for _, ip := range nodeIPs {
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("nodePortAddresses: not a CIDR: %q", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// serviceHealthIPs are the addresses the health-check node ports of
// family's engine listen on: its node IPs inside nodePortAddresses. nil
// (every address) when single-stack with no nodePortAddresses, as
// kube-proxy; with two engines each listens on its own family's addresses
// so they do not collide.
func serviceHealthIPs(npa []netip.Prefix, nodeIPs []netip.Addr, family v1.IPFamily, dual bool) []netip.Addr {
	ips := ipsOf(nodeIPs, family)
	if len(npa) == 0 {
		if dual {
			return ips
		}
		return nil
	}
	out := []netip.Addr{}
	for _, ip := range ips {
		for _, p := range npa {
			if p.Contains(ip) {
				out = append(out, ip)
				break
			}
		}
	}
	return out
}
