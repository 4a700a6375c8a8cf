//go:build linux

package nftables

import "context"

// nftablesDrifted runs the drift hook (tests only).
func NftablesDriftedForTest(p *Proxier) (bool, error) { return p.p.drifted(context.Background()) }
