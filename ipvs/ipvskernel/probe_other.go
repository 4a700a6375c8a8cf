//go:build !linux

package ipvskernel

import "github.com/svcproxy/svcproxy/ipvs"

// Probe reports IPVS as unavailable: it exists only on Linux.
func Probe(opts ProbeOptions) ProbeResult {
	return ProbeResult{Reason: ipvs.ErrNotSupported}
}
