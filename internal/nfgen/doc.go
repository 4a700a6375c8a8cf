// Package nfgen tells cheaply whether netfilter rules changed since the
// engines last wrote or verified them, so a full resync of an unchanged
// table can skip listing it.
//
//   - nftables (and iptables-nft, whose tables are nftables tables): the
//     kernel's ruleset generation id (NFT_MSG_GETGEN, NFTA_GEN_ID) counts
//     every committed nftables transaction in the network namespace, of any
//     table or family. Generation reads it. An engine that reads it just
//     before and just after its own transaction and finds after == before+1
//     knows no other transaction committed in between; Custody keeps that
//     chain of proof from one sync to the next.
//   - iptables-legacy has no generation: LegacyDigest reads a table's blob
//     (IPT_SO_GET_INFO and IPT_SO_GET_ENTRIES, the IPv6 ones for IPv6) and
//     hashes it, skipping each entry's packet and byte counters, which move
//     with traffic. That copies the whole blob (BenchmarkKernelLegacyDigest
//     in BENCHMARKS.md); LegacyInfo reads only the size, entry count and
//     hook offsets, in microseconds, and misses a change that keeps both.
//
// Both read the network namespace of the calling thread at each call. Off
// Linux every call fails with ErrUnsupported.
package nfgen
