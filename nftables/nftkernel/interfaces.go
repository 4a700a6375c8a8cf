//go:build linux

package nftkernel

import (
	"fmt"
	"os/exec"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/nftables"
)

// NewInterfaces returns the real nftables.Interfaces for family: the
// kube-proxy table through the nft binary (nft and kernel versions as
// nftables.CheckHostVersions requires: a *nftables.VersionError
// otherwise), and the same table of the other family for Cleanup.
// Listings use netlink where knftables offers it, full syncs, the
// self-check and the drift check read the table over netlink
// (NewNetlinkRuleLister), a full resync of an unchanged table is told by
// the generation id (NewGenerationReader), and partial syncs write over
// netlink (NewNetlinkWriter), with NFTVersion the version of nft.
func NewInterfaces(family v1.IPFamily) (nftables.Interfaces, error) {
	other := v1.IPv6Protocol
	if family == v1.IPv6Protocol {
		other = v1.IPv4Protocol
	}
	// Upstream's version requirements, with a typed error that names the
	// one not met (knftables.New would refuse an old nft too, untyped).
	if err := nftables.CheckHostVersions(); err != nil {
		return nftables.Interfaces{}, err
	}
	nft, err := knftables.New(nftables.Family(family), nftables.TableName, knftables.UseNetlink)
	if err != nil {
		return nftables.Interfaces{}, fmt.Errorf("nftables: %w", err)
	}
	ifs := nftables.Interfaces{NFTables: nft, Comments: NewNetlinkRuleLister(family), Generation: NewGenerationReader(),
		Netlink: NewNetlinkWriter(), NFTVersion: nftVersion()}
	if o, err := knftables.New(nftables.Family(other), nftables.TableName, knftables.UseNetlink); err == nil {
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
