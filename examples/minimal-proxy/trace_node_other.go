//go:build !linux

package main

import (
	"errors"
	"runtime"
)

// readNodeView: the node's addresses and routes are read with netlink,
// on Linux only.
func readNodeView(v6 bool) (*nodeView, error) {
	return nil, errors.New("trace reads Linux dataplanes (iptables, nftables, ipvs); not available on " + runtime.GOOS)
}
