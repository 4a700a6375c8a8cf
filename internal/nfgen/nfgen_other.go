//go:build !linux

package nfgen

import "hash/maphash"

// Generation is not supported off Linux.
func Generation() (uint32, error) { return 0, ErrUnsupported }

// LegacyDigest is not supported off Linux.
func LegacyDigest(ipv6 bool, table string, seed maphash.Seed) (Digest, bool, error) {
	return Digest{}, false, ErrUnsupported
}

// LegacyInfo is not supported off Linux.
func LegacyInfo(ipv6 bool, table string) (Digest, bool, error) {
	return Digest{}, false, ErrUnsupported
}
