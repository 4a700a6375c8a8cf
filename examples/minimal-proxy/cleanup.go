package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/ipvs"
	"github.com/svcproxy/svcproxy/ipvs/ipvskernel"
	enginebase "github.com/svcproxy/svcproxy/proxy/engine"
	"github.com/svcproxy/svcproxy/userspace"
)

// cleanupAll removes what any proxy mode left on the node, ours or
// kube-proxy's: the iptables mode's chains and jump rules, the userspace
// mode's capture rules (both in every iptables backend and family present),
// the nftables mode's kube-proxy tables (ip and ip6), and, when the kernel
// has IPVS, the IPVS mode's virtual servers, ipsets,
// kube-ipvs0 link and rules. Nothing else is touched. It tries everything
// and returns the failures joined.
//
// The modes share chains (KUBE-MARK-MASQ, KUBE-POSTROUTING,
// KUBE-PROXY-FIREWALL, …), and a chain cannot be deleted while another
// mode's chain still jumps to it, so one mode's cleanup can fail only
// because another's has not run yet. When a round fails, a second round
// runs after every mode has flushed its chains, and only its failures
// count.
//
// The writers' switches hold here too: --iptables-legacy-restore-tool
// (and SVCPROXY_IPTABLES_LEGACY_IN_PROCESS, which xtables.New reads)
// make every restore of the legacy cleanup iptables-legacy-restore's;
// the nftables cleanup deletes the tables through nft whatever
// --nftables-netlink says.
func cleanupAll(ctx context.Context, o *options, log logr.Logger) error {
	legacyTool := o != nil && o.legacyRestoreTool
	err := cleanupRound(ctx, legacyTool, log)
	if err == nil {
		return nil
	}
	log.V(1).Info("Cleanup round left something behind; trying once more now that every mode has run", "error", err.Error())
	return cleanupRound(ctx, legacyTool, log)
}

// cleanupRound runs every mode's cleanup once.
func cleanupRound(ctx context.Context, legacyTool bool, log logr.Logger) error {
	var errs []error
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			l := log.WithValues("backend", backend, "family", family)
			ipt, err := xtables.New(xtables.RunnerConfig{Family: family, Backend: backend, Logger: l, LegacyTool: legacyTool})
			if errors.Is(err, xtables.ErrNoBinary) {
				l.V(1).Info("No iptables binaries for this backend and family; nothing to clean")
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("iptables %s %s: %w", backend, family, err))
				continue
			}
			iptErr := cleanupIPTables(ctx, family, ipt, l)
			if iptErr != nil {
				errs = append(errs, fmt.Errorf("iptables mode (%s, %s): %w", backend, family, iptErr))
			}
			usErr := cleanupUserspace(ctx, family, ipt, l)
			if usErr != nil {
				errs = append(errs, fmt.Errorf("userspace mode (%s, %s): %w", backend, family, usErr))
			}
			switch {
			case iptErr == nil && usErr == nil:
				l.Info("Removed iptables and userspace mode rules")
			case iptErr == nil:
				l.Info("Removed iptables mode rules")
			case usErr == nil:
				l.Info("Removed userspace mode rules")
			}
		}
	}
	if err := cleanupNFTables(ctx, log); err != nil {
		errs = append(errs, err)
	}
	if err := ipvskernel.Probe(ipvskernel.ProbeOptions{}).Usable(""); err != nil {
		log.Info("No IPVS in this kernel; nothing of the ipvs mode to clean", "reason", err.Error())
		return errors.Join(errs...)
	}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if err := cleanupIPVS(ctx, family, legacyTool, log.WithValues("family", family)); err != nil {
			errs = append(errs, fmt.Errorf("ipvs mode (%s): %w", family, err))
		}
	}
	return errors.Join(errs...)
}

// cleanupIPTables builds an iptables proxier over ipt only to call its
// Cleanup.
func cleanupIPTables(ctx context.Context, family v1.IPFamily, ipt xtables.Runner, log logr.Logger) error {
	p, err := iptables.NewProxier(iptables.Config{Common: enginebase.Common{IPFamily: family, Logger: log}}, iptables.Interfaces{IPTables: ipt})
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Cleanup(ctx)
}

// cleanupUserspace builds a userspace proxier over ipt (capturing, so its
// Cleanup removes capture rules; it opens no socket) only to call its
// Cleanup.
func cleanupUserspace(ctx context.Context, family v1.IPFamily, ipt xtables.Runner, log logr.Logger) error {
	// Its constructor's notes about serving (no host IP, say) do not
	// concern a cleanup: V(1).
	p, err := userspace.NewProxier(userspace.Config{Common: enginebase.Common{IPFamily: family, Logger: log.V(1)}, Capture: userspace.CaptureIPTables},
		userspace.Interfaces{IPTables: ipt})
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Cleanup(ctx)
}

// cleanupIPVS builds an IPVS proxier over the kernel only to call its Cleanup.
func cleanupIPVS(ctx context.Context, family v1.IPFamily, legacyTool bool, log logr.Logger) error {
	ipt, err := xtables.New(xtables.RunnerConfig{Family: family, Logger: log, LegacyTool: legacyTool})
	if err != nil {
		return err
	}
	ifs, err := ipvskernel.NewInterfaces(ipvskernel.InterfacesOptions{Family: family, IPTables: ipt})
	if err != nil {
		return err
	}
	defer ifs.IPVS.Close()
	p, err := ipvs.NewProxier(ipvs.Config{Common: enginebase.Common{IPFamily: family, Logger: log}}, ifs)
	if err != nil {
		return err
	}
	if err := p.Cleanup(ctx); err != nil {
		return err
	}
	log.Info("Removed ipvs mode state")
	return nil
}
