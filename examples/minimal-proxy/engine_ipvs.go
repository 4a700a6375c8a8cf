package main

import (
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	"github.com/svcproxy/svcproxy/ipvs/ipvstest"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

// buildIPVS builds the IPVS engine: over the kernel (IPVS and ipset
// through netlink, the kube-ipvs0 dummy link, sysctls, iptables), or for a
// dry run over ipvstest's and iptablestest's in-memory fakes, whose state
// after one sync is the plan.
func buildIPVS(p engineParams, family v1.IPFamily) (*engine, error) {
	vcfg, npa, err := ipvsConfig(p, family)
	if err != nil {
		return nil, err
	}

	if p.dryRun {
		fakes := ipvstest.NewFakes(family)
		fakes.Netlink.AddLink("eth0", p.nodeIPs...)
		if p.opts.ipvsNode != nil {
			if fakes, err = p.opts.ipvsNode(family); err != nil {
				return nil, err
			}
		}
		proxier, err := ipvs.NewProxier(vcfg, fakes.Interfaces())
		if err != nil {
			return nil, err
		}
		return newEngine(modeIPVS, proxier, nil), nil
	}

	ipt, err := p.newRunner(family)
	if err != nil {
		return nil, err
	}
	ifs, err := ipvskernel.NewInterfaces(ipvskernel.InterfacesOptions{Family: family, IPTables: ipt})
	if err != nil {
		return nil, fmt.Errorf("ipvs: %w", err)
	}
	vcfg.HealthServer = p.health
	svcHealth := newServiceHealth(p, npa, family)
	if svcHealth != nil {
		vcfg.ServiceHealthServer = svcHealth
	}
	vcfg.Conntrack = conntrack.New()
	proxier, err := ipvs.NewProxier(vcfg, ifs)
	if err != nil {
		_ = ifs.IPVS.Close()
		return nil, err
	}
	return newEngine(modeIPVS, proxier, svcHealth), nil
}

// ipvsConfig is the IPVS engine's configuration for the family, from
// the proxy's options, and the node-port addresses; the interfaces (and
// the health servers of a real run) are left to the caller.
func ipvsConfig(p engineParams, family v1.IPFamily) (ipvs.Config, []netip.Prefix, error) {
	cfg := p.opts.config
	itDetector, err := localDetector(cfg, family, p.node)
	if err != nil {
		return ipvs.Config{}, nil, err
	}
	npa, err := nodePortAddresses(cfg.NodePortAddresses, p.nodeIPs)
	if err != nil {
		return ipvs.Config{}, nil, err
	}
	var exclude []netip.Prefix
	for _, c := range cfg.IPVS.ExcludeCIDRs {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return ipvs.Config{}, nil, fmt.Errorf("ipvs.excludeCIDRs: not a CIDR: %q", c)
		}
		exclude = append(exclude, pfx.Masked())
	}
	vcfg := ipvs.Config{
		Common: commonConfig(p, family, "ipvs", cfg.IPVS.SyncPeriod.Duration, cfg.IPVS.MinSyncPeriod.Duration),
		Netfilter: enginebase.Netfilter{
			MasqueradeAll:     cfg.IPTables.MasqueradeAll,
			MasqueradeBit:     masqBit(cfg.IPTables.MasqueradeBit),
			LocalDetector:     itDetector,
			NodePortAddresses: npa,
		},
		Scheduler:     cfg.IPVS.Scheduler,
		ExcludeCIDRs:  exclude,
		StrictARP:     cfg.IPVS.StrictARP,
		TCPTimeout:    cfg.IPVS.TCPTimeout.Duration,
		TCPFinTimeout: cfg.IPVS.TCPFinTimeout.Duration,
		UDPTimeout:    cfg.IPVS.UDPTimeout.Duration,
	}
	return vcfg, npa, nil
}

// newServiceHealth is the health-check node-port server of an engine.
// It is nil when nodePortAddresses leaves this family no node IP to listen on.
func newServiceHealth(p engineParams, npa []netip.Prefix, family v1.IPFamily) *healthcheck.ServiceHealthServer {
	ips := serviceHealthIPs(npa, p.nodeIPs, family, p.dualStack)
	if ips != nil && len(ips) == 0 {
		p.log.Info("No node IP of this family inside nodePortAddresses: no health-check node ports", "family", family)
		return nil
	}
	return healthcheck.NewServiceHealthServer(healthcheck.ServiceHealthConfig{
		NodeName:    p.nodeName,
		NodeIPs:     ips,
		ProxyHealth: p.health,
		Metrics:     p.metrics,
		Logger:      p.log.WithName("service-health"),
	})
}
