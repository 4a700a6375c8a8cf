// Package userspacetest is the userspace engine's test kit, in the shape
// every engine's kit has: Fakes (the iptables the capture rules go to, an
// xtablestest.Fake, and Sockets, the real socket layer with
// proxytest.Faults and an optional redirect of backend dials), NewFakes,
// Fakes.Interfaces, Fakes.Dump and NewTracer. It answers, for the
// userspace engine, the question every svcproxy tracer answers: where
// does a packet from S to D:port go?
//
// Tracer reads what the proxier actually programmed: in CaptureIPTables
// mode the rules in the proxier's chains as its xtables.Runner reports
// them (iptables-save of the nat and filter tables, so the same tracer
// works over xtablestest.Fake and over a real kernel), then the proxy
// socket the matching rule redirects to, then the endpoints of that
// socket's balancer; in the other modes the proxy sockets bound at the
// destination. A rule that redirects to a port where no proxy socket
// listens is an error, not a guess.
//
// The userspace proxy always opens the backend connection itself, so a
// forwarded packet is always reported as masqueraded. With no endpoint the
// capture rules reject new connections (no endpoint at all) or drop them
// (endpoints exist, none under the traffic policy); without capture rules
// the proxy resets TCP connections (Rejected) and drops UDP datagrams
// (Dropped).
package userspacetest
