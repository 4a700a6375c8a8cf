package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/healthcheck"
	"github.com/svcproxy/svcproxy/winkernel"
	"github.com/svcproxy/svcproxy/winkernel/winkerneltest"
)

// winkernelConfig maps the KubeProxyConfiguration (its winkernel section,
// KUBE_NETWORK as kube-proxy reads it, the iptables periods kube-proxy's
// Windows mode also uses) to the engine's Config.
func winkernelConfig(p engineParams, family v1.IPFamily) (winkernel.Config, error) {
	cfg := p.opts.config
	w := cfg.Winkernel
	wcfg := winkernel.Config{
		Common:                commonConfig(p, family, "winkernel", cfg.IPTables.SyncPeriod.Duration, cfg.IPTables.MinSyncPeriod.Duration),
		NetworkName:           w.NetworkName,
		EnableDSR:             w.EnableDSR,
		RootHNSEndpointName:   w.RootHnsEndpointName,
		ForwardHealthCheckVIP: w.ForwardHealthCheckVip,
	}
	if wcfg.NetworkName == "" {
		wcfg.NetworkName = os.Getenv("KUBE_NETWORK")
	}
	if wcfg.NetworkName == "" && p.dryRun {
		// The dry run makes its own fake HNS network; any name will do.
		wcfg.NetworkName = "dry-run"
	}
	if wcfg.NetworkName == "" {
		return wcfg, fmt.Errorf("winkernel.networkName: not set, and no KUBE_NETWORK in the environment")
	}
	if s := strings.TrimSpace(w.SourceVip); s != "" {
		vip, err := netip.ParseAddr(s)
		if err != nil {
			return wcfg, fmt.Errorf("winkernel.sourceVip: %w", err)
		}
		if vip.Unmap().Is4() == (family == v1.IPv4Protocol) {
			wcfg.SourceVIP = vip.Unmap()
		}
	}
	if _, port, err := net.SplitHostPort(cfg.HealthzBindAddress); err == nil {
		if n, err := strconv.Atoi(port); err == nil && n > 0 {
			wcfg.HealthzPort = n
		}
	}
	return wcfg, nil
}

// buildWinkernel builds the Windows HNS engine ("kernelspace"): over the
// host's HNS, or for a dry run over winkerneltest's fake HNS holding only
// the named network (overlay when a source VIP is configured, else
// l2bridge) and no endpoints, so the plan depends only on the objects.
func buildWinkernel(p engineParams, family v1.IPFamily) (*engine, error) {
	wcfg, err := winkernelConfig(p, family)
	if err != nil {
		return nil, err
	}
	if p.dryRun {
		fakes := winkerneltest.NewFakes(family)
		typ := winkernel.NetworkL2Bridge
		if wcfg.SourceVIP.IsValid() {
			typ = winkernel.NetworkOverlay
		}
		fakes.HNS.AddNetwork(winkernel.Network{Name: wcfg.NetworkName, Type: typ,
			Features: winkernel.Features{DSR: true, SessionAffinity: true, ModifyLoadBalancer: true, RemoteSubnet: true}})
		proxier, err := winkernel.NewProxier(wcfg, fakes.Interfaces())
		if err != nil {
			return nil, err
		}
		return newEngine(modeKernelspace, proxier, nil), nil
	}
	hns, err := winkernel.NewHNS()
	if err != nil {
		return nil, err
	}
	wcfg.HostMAC = hostMAC(p.nodeIPs)
	wcfg.HealthServer = p.health
	var svcHealth *healthcheck.ServiceHealthServer
	if svcHealth = newServiceHealth(p, nil, family); svcHealth != nil {
		wcfg.ServiceHealthServer = svcHealth
	}
	proxier, err := winkernel.NewProxier(wcfg, winkernel.Interfaces{HNS: hns})
	if err != nil {
		return nil, err
	}
	return newEngine(modeKernelspace, proxier, svcHealth), nil
}

// hostMAC is the MAC of the interface holding a node IP, written as HNS
// does (dashes), or "" when none is found: kube-proxy uses it for the
// overlay source-VIP endpoint.
func hostMAC(nodeIPs []netip.Addr) string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil || len(ifc.HardwareAddr) == 0 {
			continue
		}
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			for _, ip := range nodeIPs {
				if pfx.Addr().Unmap() == ip.Unmap() {
					return strings.ReplaceAll(ifc.HardwareAddr.String(), ":", "-")
				}
			}
		}
	}
	return ""
}

// cleanupWinkernel removes the load balancers and remote endpoints the
// winkernel engine owns (see the winkernel package's ownership rule) on
// the network named by cfg.
func cleanupWinkernel(ctx context.Context, p engineParams) error {
	var errs []error
	for _, family := range nodeFamilies(p.nodeIPs) {
		wcfg, err := winkernelConfig(p, family)
		if err != nil {
			return err
		}
		hns, err := winkernel.NewHNS()
		if err != nil {
			return err
		}
		proxier, err := winkernel.NewProxier(wcfg, winkernel.Interfaces{HNS: hns})
		if err != nil {
			return err
		}
		if err := proxier.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", family, err))
		}
		_ = proxier.Close()
	}
	if len(errs) > 0 {
		return fmt.Errorf("winkernel cleanup: %v", errs)
	}
	return nil
}
