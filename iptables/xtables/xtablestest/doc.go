// Package xtablestest provides a stateful fake of iptables (Fake) and a
// packet tracer over it (Tracer), for testing code that programs iptables
// through xtables.Runner: the svcproxy engines (iptables, and the ipvs and
// userspace engines' helper rules), and CNI agents or other embedders that
// want to check what their rules do to a packet without root or a kernel.
//
// It is the driver's test kit, beside the driver (package xtables), and
// imports no engine: the ipvs and userspace kits use it without the
// iptables engine. The iptables engine's kit, iptablestest, bundles a Fake
// with a Sysctl as that engine's Interfaces. Failures are injected
// with the verbs of proxytest.Faults, which the Fake embeds:
// fake.FailOn("Restore", 1, err) fails the next Restore; any method name
// ("SaveInto", "EnsureRule", ...) works the same, and Calls counts them.
//
// # Fake
//
// Fake implements xtables.Runner for one IP family and keeps real
// state: tables; their built-in chains (in hook order, with policies);
// user chains; each chain's rules in order. It validates as the kernel
// and the iptables tools do, so rules the real tool refuses fail here:
// jumps to missing chains, unknown targets, unknown options of known
// extensions, protocol matches without -p, DNAT outside the nat table,
// DROP or REJECT inside it, targets in a built-in chain of a hook they
// are not allowed at (REJECT in PREROUTING, MASQUERADE in OUTPUT; for
// rules in user chains the Tracer reports this on the paths reaching them),
// addresses of the wrong family, chain names over 28 characters, jump
// loops reachable from a built-in chain (the kernel accepts a loop it
// never walks), -i where there is no input interface (OUTPUT,
// POSTROUTING) and -o where there is no output interface yet
// (PREROUTING, INPUT), REJECT outside the filter table, a NAT port with
// the wrong -p. Where the legacy and nft backends disagree, the Fake
// refuses what either refuses: a policy on a user chain and -X of a
// built-in chain (legacy refuses), "! -s 0.0.0.0/0" (nft refuses). It is
// stricter than both on a port above 65535 (iptables silently wraps it).
// The package's tests check these semantics, and the saved text, against
// the real iptables-restore/iptables-save 1.8 (nft and legacy backends)
// in scratch network namespaces when run as root, and every Runner method
// against the real exec Runner (xtables.New).
// Matches of extensions the Fake does not know are accepted (the kernel
// may well have them), parsed generically, and refused by the Tracer.
//
// Restore behaves as "iptables-restore --noflush":
//   - "*table" starts a table, "COMMIT" applies it. Each table is applied
//     atomically at its COMMIT: a failing line leaves that table as it
//     was, and returns an *xtables.RestoreError naming the line (as the
//     real Runner does) that wraps one of this package's errors. As with the real
//     tool (both the legacy and the nft backends), tables committed before
//     the failing one in the same input stay committed. A failure injected
//     with FailOn or SetRestoreHook changes nothing at all.
//   - ":CHAIN - [0:0]" creates a user chain, or flushes it if it exists;
//     ":BUILTIN POLICY [0:0]" sets a built-in chain's policy ("-" keeps it)
//     and never flushes it.
//   - -A, -I [n], -D (rule or number), -R n, -N, -X [chain], -F [chain],
//     -P and -Z work as in iptables; -X needs an empty, unreferenced chain.
//     -E (rename) is refused as unsupported.
//   - Arguments split as iptables-restore splits them: on blanks, with
//     "double quotes" grouping and, inside quotes only, a backslash making
//     the next character literal.
//   - Blank lines, "# comments" and "[packets:bytes]" counters are ignored.
//
// Rules are compared as the kernel compares them (for -D, EnsureRule and
// DeleteRule) and printed by Dump, SaveInto and Rules in the normalized
// form iptables-save prints: -s, -d, -i, -o, -p first (addresses with
// their prefix length), then matches in the order given, implicit
// protocol matches written out ("-p tcp --dport 80" prints as
// "-p tcp -m tcp --dport 80"), then the target. The options of the
// extensions a service proxy uses are printed as iptables-save 1.8 does:
// MARK and CONNMARK as --set-xmark value/mask (CONNMARK --save-mark and
// --restore-mark with both masks), mark values in hex, statistic
// probabilities with 11 decimals, recent with its defaults (--mask,
// --rsource) filled in, tcp/udp --sport before --dport, --syn as
// --tcp-flags FIN,SYN,RST,ACK SYN, port ranges in full (":1024" as
// "0:1024"), probabilities as the kernel's 31-bit fraction (0.3333333333
// saves as 0.33333333349), limit rates in their largest exact unit with
// default bursts omitted, conntrack states in the kernel's order, ICMP
// type names as numbers, REJECT with its default --reject-with, LOG
// without its default level, addresses with a /0 mask dropped; other
// options keep the order written. Options may be abbreviated, as getopt
// allows ("--to" for "--to-destination"). Where the legacy
// and nft backends differ (nft merges two "-m tcp" of one rule), the
// Fake follows legacy. Dump omits the "# Generated by" lines and
// prints counters as [0:0], so it is deterministic and round-trips
// through NewFakeFromDump.
//
// Stats counts restores, lines and bytes written (and keeps the last
// restore input), for tests asserting how much an engine wrote.
// FailOn (proxytest.Faults) and SetRestoreHook inject failures. The Fake
// stamps tables as the legacy runner does (TableStamp: every call that
// may change a table changes every table's stamp); SetTableWatch models a
// backend's table watch and SetCapabilities its Capabilities.
//
// # Tracer
//
// Tracer (a proxytest.Tracer) answers "a packet from S to D:port: which
// backends may it reach, is it masqueraded, dropped or rejected?" by
// walking the Fake's chains as the kernel does for the packet's origin:
//
//   - FromExternal and FromPod (arriving on TracerConfig.ExternalInterface
//     or PodInterface): raw, mangle and nat PREROUTING; the routing
//     decision on the (possibly DNAT'd) destination; for a local
//     destination mangle, filter, security and nat INPUT; otherwise
//     mangle, filter and security FORWARD, then mangle and nat POSTROUTING.
//   - FromNode: raw, mangle and nat OUTPUT; rerouting; filter and
//     security OUTPUT; mangle and nat POSTROUTING; and for a local
//     destination the way back in on "lo" (raw and mangle PREROUTING,
//     mangle, filter and security INPUT; not nat: the connection is
//     already NATed).
//
// Routing refuses (Dropped) a packet with a loopback address that does not
// stay on the node, as the kernel does: a node's packet from 127.0.0.1
// DNAT'd to another host, an arriving packet to or from 127.0.0.0/8 that
// was not DNAT'd away from it, unless route_localnet is on; IPv6 loopback
// always. route_localnet is read from TracerConfig.Sysctl (the kernel's
// default is off, and iptables.Proxier turns it on for
// Config.LocalhostNodePorts), and assumed on without one.
//
// The traced packet opens a connection (a TCP SYN, an unfragmented
// datagram): conntrack --ctstate NEW matches,
// ESTABLISHED, RELATED and INVALID never do, DNAT and SNAT match once the
// path has applied them. Supported matches: -s, -d, -p, -i, -o (with !
// and the + wildcard), -f; tcp, udp, sctp (--dport, --sport, --syn,
// --tcp-flags), multiport, comment, addrtype (LOCAL is TracerConfig.NodeIPs
// plus loopback; --limit-iface-in/out do not change the answer),
// statistic, recent, mark, connmark, conntrack (--ctstate, --ctorigdst,
// --ctorigsrc, --ctorigdstport, --ctproto), state, set (answered by
// TracerConfig.IPSetMatch), limit (the first packet is within any limit),
// --sport (the packet's SrcPort, else TracerConfig.SourcePort),
// physdev (ignored: matches). Targets: ACCEPT, DROP, RETURN, REJECT,
// jumps, -g goto, DNAT, SNAT, MASQUERADE, REDIRECT (to the first NodeIP
// from PREROUTING, to loopback from OUTPUT), MARK, CONNMARK, NOTRACK/CT
// --notrack, and LOG, NFLOG, TCPMSS, CHECKSUM, TRACE (no effect on the
// path). Any other match or target, or an option of a known one the
// tracer does not model, makes the trace fail with an error naming it:
// a rule is never silently skipped.
//
// Random and stateful matches make several paths possible: "statistic"
// with a probability strictly between 0 and 1 (or nth mode) follows both
// outcomes, as does "recent --rcheck/--update" (an earlier connection of
// the client may or may not have left an entry; an entry set earlier on
// the same path is certain). TraceAll returns every path with its
// verdict, DNAT destination, masquerading and the rules it hit. Trace
// (the proxytest.Tracer method) combines them: Backends is the sorted
// union of the DNAT destinations; Masquerade and Sticky are true if any
// path has them. Masquerade means a MASQUERADE or SNAT rule applied (or,
// if TracerConfig.MasqueradeMark is set, the packet left POSTROUTING with
// that mark); Sticky means the path records or checks the client in a
// "recent" list (ClientIP session affinity). If the paths end in
// different verdicts (say one is DNAT'd and forwarded while another is
// dropped), Trace returns an *AmbiguousError holding every path rather
// than picking one: a service proxy's rules should never do that.
//
// The Tracer models netfilter, not the whole stack: routing is
// TracerConfig's (local addresses, routes, arrival interfaces), reverse
// path filtering and martian checks are not modelled, and nothing
// outside the Fake (ipsets aside) is consulted.
//
// # Example
//
// A test of a CNI agent or a proxy engine seeds a Fake (or hands it to
// the code under test as its xtables.Runner), then asks the Tracer:
//
//	fake, err := xtablestest.NewFakeFromDump(v1.IPv4Protocol, savedRules)
//	...
//	tracer := xtablestest.NewTracer(fake, xtablestest.TracerConfig{
//		NodeIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")},
//		Routes:  []xtablestest.Route{{Prefix: netip.MustParsePrefix("10.180.0.0/24"), Interface: "cbr0"}},
//	})
//	res, err := tracer.Trace(proxytest.Packet{
//		Origin: proxytest.FromPod,
//		Src:    netip.MustParseAddr("10.180.0.9"),
//		Dst:    netip.MustParseAddr("172.30.0.41"), Port: 80, Protocol: v1.ProtocolTCP,
//	})
//	// res.Verdict == proxytest.Forwarded, res.Backends == [10.180.0.1:80 10.180.0.2:80]
//
// See ExampleTracer for a complete, runnable version. For the shared
// conformance topology (proxytest.Topology), TracerConfigFor gives the
// exact node description: one host interface per pod, two uplinks, the
// world route. The package's tests check the Tracer against real packets
// on that topology (internal/netnstest, root only): the kernel, with the
// nft and the legacy backend, does what the Tracer says.
package xtablestest
