//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// buildNFTables builds the nftables engine: over the kube-proxy table
// through nft (and netlink listings), or for a dry run over nftablestest's
// fake, the plan being the transaction a cold start would run.
func buildNFTables(p engineParams, family v1.IPFamily) (*engine, error) {
	cfg := p.opts.config
	detector, err := localDetector(cfg, family, p.node)
	if err != nil {
		return nil, err
	}
	npa, err := nodePortAddresses(cfg.NodePortAddresses, p.nodeIPs)
	if err != nil {
		return nil, err
	}
	ncfg := nftables.Config{
		Common: commonConfig(p, family, "nftables", cfg.NFTables.SyncPeriod.Duration, cfg.NFTables.MinSyncPeriod.Duration),
		// --masquerade-all lands in iptables.masqueradeAll (kube-proxy's
		// flag table); it means the same in the nftables mode.
		Netfilter: enginebase.Netfilter{
			MasqueradeAll:     cfg.NFTables.MasqueradeAll || cfg.IPTables.MasqueradeAll,
			MasqueradeBit:     masqBit(cfg.NFTables.MasqueradeBit),
			LocalDetector:     detector,
			NodePortAddresses: npa,
		},
		// kube-proxy v1.37's KubeProxyNFTablesLocalhostNodePorts.
		LocalhostNodePorts: featureEnabled(cfg.FeatureGates, gateLocalhostNodePorts),
		NFTOnly:            p.opts.nftOnly,
	}
	var ifs nftables.Interfaces
	var svcHealth *healthcheck.ServiceHealthServer
	if p.dryRun {
		ips := ipsOf(p.nodeIPs, family)
		ncfg.LocalAddresses = func() ([]netip.Addr, error) { return ips, nil }
		ifs = nftablestest.NewFakes(family).Interfaces()
	} else {
		ncfg.HealthServer = p.health
		if svcHealth = newServiceHealth(p, npa, family); svcHealth != nil {
			ncfg.ServiceHealthServer = svcHealth
		}
		ncfg.Conntrack = conntrack.New()
		if ifs, err = nftkernel.NewInterfaces(family); err != nil {
			return nil, err
		}
	}
	proxier, err := nftables.NewProxier(ncfg, ifs)
	if err != nil {
		return nil, err
	}
	return newEngine(modeNFTables, proxier, svcHealth), nil
}

// probeNFTables reports why the nftables mode cannot run here: no nft
// binary, or one older than 1.0.1 (knftables checks), or no nftables in
// the kernel.
func probeNFTables() error {
	if _, err := nftkernel.NewInterfaces(v1.IPv4Protocol); err != nil {
		return err
	}
	return nil
}

// cleanupNFTables deletes the kube-proxy table of both families (ours or
// upstream kube-proxy's); no nft binary means nothing to clean.
func cleanupNFTables(ctx context.Context, log logr.Logger) error {
	if err := probeNFTables(); err != nil {
		log.V(1).Info("No usable nft; nothing of the nftables mode to clean", "reason", err.Error())
		return nil
	}
	if err := nftables.CleanupLeftovers(ctx); err != nil {
		return fmt.Errorf("nftables mode: %w", err)
	}
	log.Info("Removed nftables mode tables")
	return nil
}

// registerNFTablesMetrics adds, in the nftables mode with the
// KubeProxyNFTablesLocalhostNodePorts gate on, what kube-proxy v1.37 adds
// then: kubeproxy_nftables_localhost_nodeport_rejected_packets_total, read
// from the kube-proxy table's named counters of both families at each
// scrape (the listener metrics are among metrics.New's).
func registerNFTablesMetrics(reg prometheus.Registerer, mode string, gates map[string]bool) error {
	if mode != modeNFTables || !featureEnabled(gates, gateLocalhostNodePorts) {
		return nil
	}
	tables := map[v1.IPFamily]knftables.Interface{}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if ifs, err := nftkernel.NewInterfaces(family); err == nil {
			tables[family] = ifs.NFTables
		}
	}
	read := func() ([]metrics.LocalhostNodePortRejected, error) {
		var out []metrics.LocalhostNodePortRejected
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			nft, ok := tables[family]
			if !ok {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r, err := nftables.LocalhostRejectedPackets(ctx, nft, family)
			cancel()
			if err == nil {
				out = append(out, r...)
			}
		}
		return out, nil
	}
	return reg.Register(metrics.NewLocalhostNodePortRejectedCollector(read))
}
