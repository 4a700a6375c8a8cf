package main

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
	"github.com/svcproxy/svcproxy/userspace"
	"github.com/svcproxy/svcproxy/userspace/userspacetest"
)

// buildUserspace builds the userspace engine: proxy sockets on bindAddress
// in portRange, with iptables capture rules when iptables is there (else
// it serves node ports and bindAddress only: the fallback for nodes
// without a usable iptables).
func buildUserspace(p engineParams, family v1.IPFamily) (*engine, error) {
	cfg := p.opts.config
	portRange, err := userspace.ParsePortRange(cfg.PortRange)
	if err != nil {
		return nil, fmt.Errorf("portRange: %w", err)
	}
	clusterCIDRs, err := parseCIDRList(cfg.ClusterCIDR)
	if err != nil {
		return nil, fmt.Errorf("clusterCIDR: %w", err)
	}
	var listen netip.Addr
	if a, err := netip.ParseAddr(cfg.BindAddress); err == nil && !a.IsUnspecified() {
		listen = a.Unmap()
	}
	// Node-originated traffic is DNATed to the node IP of this family (as
	// kube-proxy's userspace mode did), not to whichever global address
	// the proxier would find first: with several (pod gateways, a bridge)
	// that one may not answer UDP from the service address.
	var hostIP netip.Addr
	for _, ip := range p.nodeIPs {
		if ip.Unmap().Is6() == (family == v1.IPv6Protocol) {
			hostIP = ip.Unmap()
			break
		}
	}
	common := commonConfig(p, family, "userspace", cfg.IPTables.SyncPeriod.Duration, cfg.IPTables.MinSyncPeriod.Duration)
	// /healthz and the health-check node ports mean the same in every
	// mode: the engine base reports to both.
	if p.health != nil {
		common.HealthServer = p.health
	}
	npa, err := nodePortAddresses(cfg.NodePortAddresses, p.nodeIPs)
	if err != nil {
		return nil, err
	}
	var svcHealth *healthcheck.ServiceHealthServer
	if !p.dryRun {
		if svcHealth = newServiceHealth(p, npa, family); svcHealth != nil {
			common.ServiceHealthServer = svcHealth
		}
	}
	ucfg := userspace.Config{
		Common:         common,
		HostIP:         hostIP,
		ListenAddress:  listen,
		ClusterCIDRs:   clusterCIDRs,
		PortRange:      portRange,
		UDPIdleTimeout: cfg.UDPIdleTimeout.Duration,
	}
	var ifs userspace.Interfaces
	if p.dryRun {
		// The plan (listeners and capture rules) over the kit's fakes: no
		// socket is opened, no rule written.
		ifs, ucfg.Capture = userspacetest.NewFakes(family).Interfaces(), userspace.CaptureIPTables
	} else if err := probeIPTables(); err == nil {
		ipt, err := p.newRunner(family)
		if err != nil {
			return nil, err
		}
		ucfg.Capture, ifs.IPTables = userspace.CaptureIPTables, ipt
		// Stale UDP flows through the capture rules are cleared as in the
		// iptables mode.
		ucfg.Conntrack = conntrack.New()
	} else {
		p.log.Info("No usable iptables: the userspace mode serves node ports and the bind address only, without capturing service IPs", "reason", err.Error())
		ucfg.Capture = userspace.CaptureNone
	}
	proxier, err := userspace.NewProxier(ucfg, ifs)
	if err != nil {
		return nil, err
	}
	return newEngine(modeUserspace, proxier, svcHealth), nil
}
