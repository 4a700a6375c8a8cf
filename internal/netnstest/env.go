package netnstest

import (
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// Env is one built conformance topology on the real kernel: the node's
// namespace and every namespace around it, with servers running.
//
//	ext1 (ExternalClient) ──veth "ext1"──┐
//	ext2 (ExternalClient2) ─veth "ext2"──┤           ┌─ veth-pod-a1 ── pod-a1
//	                                    node ───────┼─ veth-pod-a2 ── pod-a2
//	world (default gw) ────veth "world"──┘           ├─ veth-pod-b1 ── pod-b1 (labelled node-b)
//	                                                 ├─ veth-pod-b2 ── pod-b2 (labelled node-b)
//	                                                 └─ veth-client ── client
//
// The node carries NodeIP on its three uplinks and PodGateway on every pod
// veth, with a /32 (/128) route per pod; pods and external clients route
// everything through the node. The node's default route leads to world,
// which treats the service, external-IP and load-balancer ranges as its
// own (AnyIP routes) and answers on every server port as WorldName: a
// packet the node did not proxy reaches world. Inside the node only:
// forwarding on, route_localnet=1, rp_filter off, no ICMP redirects.
type Env struct {
	Topo proxytest.Topology
	// Node is the proxier's node: engines program it (see Exec).
	Node *Namespace
	// World is the upstream router behind the node's default route.
	World *Namespace
	// External and External2 hold ExternalClient and ExternalClient2.
	External, External2 *Namespace
	// Pods maps every pod name of Topo.Pods() to its namespace.
	Pods map[string]*Namespace

	servers []*servers
}
