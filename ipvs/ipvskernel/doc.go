// Package ipvskernel is the ipvs engine's kernel driver: the real
// implementations of the interfaces package ipvs drives. New returns
// ipvs.Interface over IPVS generic netlink (github.com/moby/ipvs),
// NewIPSet ipvs.IPSet over netfilter netlink (no ipset binary), NewNetlink
// ipvs.Netlink over rtnetlink (the dummy link and its addresses), NewSysctl
// ipvs.Sysctl over /proc/sys. Each works in the network namespace that
// Options.NetNSPath names (the caller's when empty) and bounds every
// kernel call by Options.SocketTimeout, so a stuck kernel call cannot hang
// a sync. NewInterfaces builds them all, with an iptables runner, as one
// ipvs.Interfaces (what an embedder, the kernel conformance tests and
// minimal-proxy's trace tests hand to ipvs.NewProxier).
//
// Errors wrap ipvs.ErrNotFound, ipvs.ErrExists and ipvs.ErrNotSupported
// (use errors.Is) together with the kernel's error; their text is built
// only on failure. Nothing is retried inside a call. The implementations
// keep no pointer to what they are handed.
//
// Probe tells whether this kernel can run the ipvs engine (the IPVS
// netlink family, its schedulers, ipset), for falling back to another
// engine. On systems other than Linux every constructor fails with
// ipvs.ErrNotSupported and Probe reports IPVS unavailable.
package ipvskernel
