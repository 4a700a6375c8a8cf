// Package conntrack deletes UDP conntrack entries through netlink, in one
// batch per call (vishvananda/netlink ConntrackDeleteFilters): the engines
// call it after a sync for the UDP services whose cluster IPs or endpoints
// went away, or which went from no endpoints to some, so that clients stop
// sending to a stale (or blackholed) translation.
//
// Guarantees: it never execs the conntrack tool and never walks the table
// once per entry; a filter matches UDP entries only; on a non-Linux OS
// every call returns ErrNotSupported. A filter with no field set is
// rejected (it would flush every UDP entry).
package conntrack
