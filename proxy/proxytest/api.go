package proxytest

// The packet and result vocabulary every engine's tracer and the
// conformance table share: Origin, Packet, Verdict, Result and Tracer.

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
)

// Origin says where a traced packet enters the node.
type Origin int

const (
	// FromExternal: arrives on the node's uplink from a client outside the cluster.
	FromExternal Origin = iota
	// FromPod: sent by a pod on this node (arrives through its veth; PREROUTING).
	FromPod
	// FromNode: sent by a process in the node's own network namespace (OUTPUT).
	FromNode
)

func (o Origin) String() string {
	switch o {
	case FromExternal:
		return "external"
	case FromPod:
		return "pod"
	case FromNode:
		return "node"
	}
	return "unknown"
}

// Packet is the first packet of a connection (or a UDP datagram).
type Packet struct {
	Origin   Origin
	Src      netip.Addr
	Dst      netip.Addr
	Port     int
	Protocol v1.Protocol
	// SrcPort, when not 0, is the UDP source port, kept the same across a
	// scenario's steps so that a stale conntrack entry would catch the
	// datagram: real-kernel probes bind it, computed tracers ignore it.
	// Only for UDP, and only where one backend is wanted.
	SrcPort int
}

// Verdict is what the node does with the packet.
type Verdict int

const (
	// NotProxied: the proxy's rules do not touch it (not a service address).
	NotProxied Verdict = iota
	// Forwarded: DNAT'd (or proxied) to one of Result.Backends.
	Forwarded
	// Rejected: answered with an ICMP unreachable / TCP reset.
	Rejected
	// Dropped: silently discarded.
	Dropped
)

func (v Verdict) String() string {
	switch v {
	case NotProxied:
		return "not-proxied"
	case Forwarded:
		return "forwarded"
	case Rejected:
		return "rejected"
	case Dropped:
		return "dropped"
	}
	return "unknown"
}

// Result is a tracer's answer.
type Result struct {
	Verdict Verdict
	// Backends are every endpoint the packet may reach, sorted.
	Backends []netip.AddrPort
	// Masquerade reports the packet is source-NATed to the node (the
	// backend does not see the client's address).
	Masquerade bool
	// Sticky reports ClientIP session affinity applies (a client keeps its backend).
	Sticky bool
}

// Tracer answers where a packet goes under the dataplane state an engine
// programmed. xtablestest (and iptablestest), nftablestest, ipvstest and
// userspacetest provide one.
type Tracer interface {
	Trace(p Packet) (Result, error)
}
