package iptables

import "github.com/svcproxy/svcproxy/proxy/conntrack"

// Transitional: the userspace engine and the reference binary still name
// the conntrack cleaner through this package. Stale-UDP conntrack cleanup
// belongs to the engine base now (engine.Common.Conntrack).
type (
	// Deprecated: use conntrack.Filter.
	ConntrackFilter = conntrack.Filter
	// Deprecated: use conntrack.Cleaner.
	ConntrackCleaner = conntrack.Cleaner
)

// NewConntrackCleaner returns the netlink cleaner.
//
// Deprecated: use conntrack.New.
func NewConntrackCleaner() ConntrackCleaner { return conntrack.New() }
