//go:build !linux

package main

import (
	"context"
	"errors"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// traceNFTables: the nftables kit is Linux only.
func traceNFTables(ctx context.Context, p proxytest.Packet, node *nodeView, run toolRunner) (*traceReport, error) {
	return nil, errors.New("trace: the nftables mode is Linux only")
}
