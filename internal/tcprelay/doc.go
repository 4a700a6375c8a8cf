// Package tcprelay is the TCP data path of svcproxy's userspace proxies:
// the userspace engine's (package userspace) and the nftables engine's
// localhost node-port proxy. It copies both directions of a proxied
// connection (spliced on Linux, a pipe held only while a burst is in
// flight), passes a clean end of one direction on as a half-close, resets
// both sides when a direction breaks or, after a half-close, the other
// side stays silent too long, and opens listening sockets with the
// keepalive settings accepted connections inherit.
//
// Nothing here keeps package-level state; a PipePool belongs to one
// proxy.
package tcprelay
