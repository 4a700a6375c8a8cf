//go:build linux

package nftables

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/knftables"
)

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
