//go:build linux

package nftables

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Defaults for the zero values of Config.
const (
	// DefaultMaxTransactionOps bounds one cold-start transaction (see
	// Config.MaxTransactionOps). Over netlink a batch costs the kernel
	// a little per message plus a check of the whole table's jump graph
	// at commit, so fewer, larger batches are cheaper, and larger ones
	// hold the kernel longer. BenchmarkKernelColdStartChunks measures a
	// cold start at each batch size (its figures: BENCHMARKS.md).
	DefaultMaxTransactionOps = 50000
)

// TableName is the table this engine owns in the ip and ip6 families:
// kube-proxy's own, so a node moves between upstream kube-proxy's nftables
// mode and this engine in either direction.
const TableName = "kube-proxy"

// Config configures a Proxier: the fields every engine shares in Common
// (see engine.Common), the fields of the engines that write netfilter
// rules in Netfilter (MasqueradeAll, MasqueradeBit, LocalDetector and
// NodePortAddresses, whose empty value means the node IPs here, as
// upstream's nftables mode, and not every local address as in iptables
// and ipvs; see engine.Netfilter), and the nftables mode's own. Every
// field has a documented zero value.
type Config struct {
	engine.Common
	engine.Netfilter

	// LocalAddresses lists this node's addresses, to expand
	// NodePortAddresses; nil means the addresses of the network interfaces.
	LocalAddresses func() ([]netip.Addr, error)
	// ServiceCIDRs, if set, makes traffic to unallocated addresses in them
	// dropped (upstream's "cluster-ips-check"). Empty: not checked.
	ServiceCIDRs []netip.Prefix
	// MaxTransactionOps bounds the size of one transaction of a full sync
	// that writes many services (a cold start): the services are written
	// in several transactions of about this many operations, so no single
	// one holds the kernel for long, and traffic to the services already
	// written flows before the last lands (0: DefaultMaxTransactionOps;
	// negative: one transaction).
	MaxTransactionOps int
	// LocalhostNodePorts is upstream's KubeProxyNFTablesLocalhostNodePorts
	// feature gate (v1.37: alpha, off; v1.38: beta, on). false (the zero
	// value, v1.37's default): node ports are not served on loopback
	// addresses, and the table holds no localhost objects (any it holds,
	// from an earlier run with the gate on, are removed). true: when
	// NodePortAddresses names a loopback prefix of the family itself
	// (127.0.0.0/8, ::1/128), a userspace proxy listening on 127.0.0.1
	// (::1) serves each TCP node port that has endpoints, and UDP and
	// SCTP node ports on loopback are rejected; otherwise all three are
	// rejected. Rejections are counted in the named counters
	// localhost-nodeport-rejected-<protocol> (see doc.go).
	LocalhostNodePorts bool
	// NFTOnly writes every transaction through nft, even with
	// Interfaces.Netlink set: the netlink writer switched off (the
	// binary's --nftables-netlink=false). Zero: the netlink writer is on
	// where the versions allow it and SVCPROXY_NFTABLES_NETLINK does not
	// say 0 (see Proxier.NetlinkStats and the package doc).
	NFTOnly bool
}

// Interfaces is what a Proxier drives: package nftkernel has the real
// ones (nftkernel.NewInterfaces), nftablestest the fakes. Every
// interface's methods are required (see "The driver" in the package
// doc).
type Interfaces struct {
	// NFTables is bound to TableName in the proxier's family (ip or ip6).
	// Required. nftablestest.Fakes supplies a fake;
	// nftkernel.NewInterfaces the real one.
	NFTables knftables.Interface
	// OtherFamily, if set, is the same table in the other family:
	// Cleanup removes it too (so --cleanup removes every leftover).
	OtherFamily knftables.Interface
	// Comments, if set, reads the table over netlink
	// (nftkernel.NewNetlinkRuleLister): for full syncs chain names, each
	// chain's first rule's comment, set and map elements, and for the
	// self-check and the drift check the rules' comments of a few chains,
	// instead of knftables' listings. nftkernel.NewInterfaces sets it.
	Comments ChainCommentLister
	// Generation, if set, reads the ruleset generation id, so a full
	// resync of a table unchanged since our last transaction skips the
	// listing (resync.go). nftkernel.NewInterfaces sets it; nil: every
	// full sync lists.
	Generation GenerationReader
	// Netlink, if set, writes the transactions of partial syncs as
	// netlink batches instead of through nft, whenever every object of
	// the transaction has a form its encoder knows (the per-service
	// chains, rules, affinity sets and elements partial syncs write);
	// otherwise, and for full syncs and the dry run, nft. nft reads the
	// whole table back before any transaction that adds a rule, so
	// through it even a small partial sync costs O(table). nil: nft
	// only. nftkernel.NewInterfaces sets it. Config.NFTOnly, the
	// environment and the versions (NFTVersion) may still keep it
	// unused; a batch the kernel refuses is written again through nft,
	// and the writer is switched off after repeated refusals or a failed
	// read-back (see Proxier.NetlinkStats).
	Netlink NetlinkWriter
	// LocalhostSockets, if set, opens the sockets of the localhost
	// node-port proxy (Config.LocalhostNodePorts): listening ones on the
	// sync goroutine, connections to endpoints on the proxy's own
	// goroutines. nil: the calling thread's network namespace, as a
	// proxy in the node's own namespace wants.
	LocalhostSockets LocalhostSockets
	// NFTVersion is the version of the nft that NFTables drives ("1.0.6"),
	// which with the kernel's decides whether Netlink is used by default
	// (internal/fastpath: the versions the writer was verified with).
	// nftkernel.NewInterfaces sets it; "" (fakes, an embedder's own
	// writer) leaves the versions unchecked.
	NFTVersion string
}

// Family returns the knftables family of an IP family (ip or ip6).
func Family(family v1.IPFamily) knftables.Family {
	if family == v1.IPv6Protocol {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

func (c Config) withDefaults() (Config, error) {
	common, err := c.Common.WithDefaults(c.IPFamily)
	if err != nil {
		return c, fmt.Errorf("nftables: %w", err)
	}
	c.Common = common
	nf, err := c.Netfilter.WithDefaults(c.IPFamily)
	if err != nil {
		return c, fmt.Errorf("nftables: %w", err)
	}
	c.Netfilter = nf
	if c.MaxTransactionOps == 0 {
		c.MaxTransactionOps = DefaultMaxTransactionOps
	}
	return c, nil
}
