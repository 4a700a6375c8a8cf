// Package nftkernel is the nftables engine's kernel driver: the real
// implementations of the interfaces package nftables drives besides
// knftables. NewNetlinkWriter returns nftables.NetlinkWriter, which sends
// a transaction as one netlink batch (the bytes nftables.WireBatch lays
// out, on a NETLINK_NETFILTER socket sized for it) and reports a refusal
// as a *nftables.BatchError; NewNetlinkRuleLister returns
// nftables.ChainCommentLister, which reads the kube-proxy table over
// netlink (whether it exists, chain names, each chain's first rule's
// comment and rule count, rules' comments, set and map elements as the
// kernel lists them); NewGenerationReader returns
// nftables.GenerationReader, the ruleset generation id. NewInterfaces
// builds them all, with knftables over the nft binary for the table of
// the family and of the other one and nft's version, as one
// nftables.Interfaces (what an embedder, examples/minimal-proxy and the
// kernel tests hand to nftables.NewProxier); it refuses a host below the
// nftables mode's requirements with a *nftables.VersionError.
//
// Each call works in the network namespace of the calling thread. The
// implementations keep nothing of what they are handed once a call
// returned; nothing is retried inside a call, except a chain-name dump
// the kernel marks interrupted (read up to three times) and a receive
// interrupted by a signal.
//
// What the engine needs of its driver is the methods of those
// interfaces, every one required; it asks nothing by type assertion and
// decodes what the driver lists itself (the element keys' layouts and the
// batch's layout are the engine's). So a wrapper that logs, counts or
// times the driver embeds the interface, or forwards each method with its
// arguments as it got them (the ctx of WriteBatch included: it carries the
// encoder's buffers, which WireBatch hands the writer to send without a
// copy), and the engine syncs, lists and writes exactly as without it
// (nftables' TestKernelForwardingInterfacesSameEngine).
//
// The package, as package nftables, is empty on systems other than Linux.
package nftkernel
