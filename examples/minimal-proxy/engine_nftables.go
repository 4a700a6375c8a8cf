//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
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
		MasqueradeAll:     cfg.NFTables.MasqueradeAll || cfg.IPTables.MasqueradeAll,
		MasqueradeBit:     masqBit(cfg.NFTables.MasqueradeBit),
		LocalDetector:     detector,
		NodePortAddresses: npa,
		// kube-proxy v1.37's KubeProxyNFTablesLocalhostNodePorts.
		LocalhostNodePorts: featureEnabled(cfg.FeatureGates, gateLocalhostNodePorts),
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
		if ifs, err = nftables.NewInterfaces(family); err != nil {
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
	if _, err := nftables.NewInterfaces(v1.IPv4Protocol); err != nil {
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
