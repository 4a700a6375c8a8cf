//go:build linux

package nftables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/fastpath"
)

// NewInterfaces returns the real Interfaces for family: the kube-proxy
// table through the nft binary (nft and kernel versions as CheckHostVersions
// requires: a *VersionError otherwise), and the
// same table of the other family for Cleanup. Listings use netlink where
// knftables offers it, and partial syncs write over netlink
// (NewNetlinkWriter).
func NewInterfaces(family v1.IPFamily) (Interfaces, error) {
	other := v1.IPv6Protocol
	if family == v1.IPv6Protocol {
		other = v1.IPv4Protocol
	}
	// Upstream's version requirements, with a typed error that names the
	// one not met (knftables.New would refuse an old nft too, untyped).
	if err := CheckHostVersions(); err != nil {
		return Interfaces{}, err
	}
	nft, err := knftables.New(Family(family), TableName, knftables.UseNetlink)
	if err != nil {
		return Interfaces{}, fmt.Errorf("nftables: %w", err)
	}
	ifs := Interfaces{NFTables: nft, Comments: NewNetlinkRuleLister(family), Generation: NewGenerationReader(),
		Netlink: NewNetlinkWriter(), NFTVersion: nftVersion(), chainRules: netlinkChainRulesLister(family), chainRulesOf: nft}
	if o, err := knftables.New(Family(other), TableName, knftables.UseNetlink); err == nil {
		ifs.OtherFamily = o
	}
	return ifs, nil
}

// nftVersion is the version nft --version prints ("1.0.6"), or
// "unknown" when it cannot be read (then the netlink writer is off unless
// SVCPROXY_NFTABLES_NETLINK=1).
func nftVersion() string {
	out, err := exec.Command("nft", "--version").Output()
	if err != nil {
		return "unknown"
	}
	v, ok := fastpath.ParseVersion(string(out))
	if !ok {
		return "unknown"
	}
	return v.String()
}

// CleanupLeftovers deletes the kube-proxy table of both families (ours or
// upstream kube-proxy's), for a --cleanup run that builds no Proxier.
func CleanupLeftovers(ctx context.Context) error {
	var errs []error
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		nft, err := knftables.New(fam, TableName)
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables: %w", err))
			continue
		}
		errs = append(errs, deleteTable(ctx, nft))
	}
	return errors.Join(errs...)
}
