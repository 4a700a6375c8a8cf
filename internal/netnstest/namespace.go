package netnstest

import (
	"sync/atomic"

	"github.com/vishvananda/netns"
)

// Namespace is a named network namespace created by this package (visible
// in `ip netns list` while it exists).
type Namespace struct {
	// Name is the namespace's name under /run/netns.
	Name string
	// Role says what it is in the topology: "node", "world", "ext1",
	// "ext2" or a pod name.
	Role   string
	handle netns.NsHandle
}

// Path is the namespace's bind-mount path (for `ip netns exec Name` or
// nsenter --net=Path).
func (n *Namespace) Path() string { return "/run/netns/" + n.Name }

// String returns the name.
func (n *Namespace) String() string { return n.Name }

var nsSeq atomic.Int64

// NamePrefix starts the name of every namespace this package creates,
// followed by the process id, so leftovers are easy to find.
const NamePrefix = "svcproxy-"
