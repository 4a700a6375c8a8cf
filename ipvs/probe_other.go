//go:build !linux

package ipvs

// Probe reports IPVS as unavailable: it exists only on Linux.
func Probe(opts ProbeOptions) ProbeResult {
	return ProbeResult{Reason: ErrNotSupported}
}
