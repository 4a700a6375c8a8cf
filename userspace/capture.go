package userspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
)

// The chains of kube-proxy's old userspace mode, plus one filter chain of ours.
const (
	// ChainPortalsContainer (nat, from PREROUTING) redirects service
	// addresses for traffic from pods and the outside.
	ChainPortalsContainer xtables.Chain = "KUBE-PORTALS-CONTAINER"
	// ChainPortalsHost (nat, from OUTPUT) does the same for traffic the node sends.
	ChainPortalsHost xtables.Chain = "KUBE-PORTALS-HOST"
	// ChainNodePortContainer (nat, from PREROUTING, destination local) redirects node ports.
	ChainNodePortContainer xtables.Chain = "KUBE-NODEPORT-CONTAINER"
	// ChainNodePortHost (nat, from OUTPUT, destination local) does the same for the node.
	ChainNodePortHost xtables.Chain = "KUBE-NODEPORT-HOST"
	// ChainNodePortNonLocal (filter, from INPUT) accepts traffic to node-port proxy sockets.
	ChainNodePortNonLocal xtables.Chain = "KUBE-NODEPORT-NON-LOCAL"
	// ChainFilter (filter, from INPUT and FORWARD) rejects new connections
	// to proxy sockets whose service has no endpoints, drops them when the
	// service has endpoints but none under the socket's traffic policy, and
	// drops load-balancer traffic from outside loadBalancerSourceRanges.
	// The old userspace mode had no equivalent.
	ChainFilter xtables.Chain = "KUBE-USERSPACE-FILTER"
)

// jumpRules hook our chains into the built-in ones, in the order they are
// appended: cluster-IP portals before node ports, so a node port never
// shadows a service address; our filter chain before the node-port
// ACCEPTs. The comments are kube-proxy's userspace mode's, so either can
// clean up after the other.
var jumpRules = []xtables.JumpRule{
	{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: ChainPortalsContainer,
		Comment: "handle ClusterIPs; NOTE: this must be before the NodePort rules"},
	{Table: xtables.TableNAT, From: xtables.ChainOutput, To: ChainPortalsHost,
		Comment: "handle ClusterIPs; NOTE: this must be before the NodePort rules"},
	{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: ChainNodePortContainer,
		Match: []string{"-m", "addrtype", "--dst-type", "LOCAL"}, Comment: "handle service NodePorts; NOTE: this must be the last rule in the chain"},
	{Table: xtables.TableNAT, From: xtables.ChainOutput, To: ChainNodePortHost,
		Match: []string{"-m", "addrtype", "--dst-type", "LOCAL"}, Comment: "handle service NodePorts; NOTE: this must be the last rule in the chain"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainFilter, Comment: "userspace proxy: no endpoints, source ranges"},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: ChainFilter, Comment: "userspace proxy: no endpoints, source ranges"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainNodePortNonLocal, Comment: "Ensure that non-local NodePort traffic can flow"},
}

// canaryRule is a rule that matches nothing of ours (no target: it only
// counts packets) and is written first into a chain on every full write.
// Its absence means the chain (or its table) was flushed or deleted
// behind our back: see Proxier.drifted.
type canaryRule struct {
	table xtables.Table
	chain xtables.Chain
	args  []string
}

// canaries: one per table we write.
var canaries = []canaryRule{
	{xtables.TableNAT, ChainPortalsContainer, []string{"-m", "comment", "--comment", "userspace proxy canary"}},
	{xtables.TableFilter, ChainFilter, []string{"-m", "comment", "--comment", "userspace proxy canary"}},
}

// ruleAction is the target of a rendered rule.
type ruleAction int

const (
	actionRedirect ruleAction = iota // REDIRECT --to-ports toPort
	actionDNAT                       // DNAT --to-destination toAddr:toPort
	actionAccept
	actionDrop
	actionReject
)

// captureRule is one rendered rule of our chains.
type captureRule struct {
	table    xtables.Table
	chain    xtables.Chain
	service  proxy.ServicePortName
	protocol v1.Protocol
	src      netip.Prefix // invalid: any
	dst      netip.Addr   // invalid: any
	// localDst adds "-m addrtype --dst-type LOCAL" (filter rules on a
	// proxy port) and, for TCP, "--ctstate NEW" so that established
	// connections keep their grace period. UDP has no such thing: every
	// datagram to a socket without endpoints is refused, flows included.
	localDst bool
	dstPort  int
	action   ruleAction
	toAddr   netip.Addr
	toPort   int
}

// args renders the rule as iptables arguments (after "-A chain").
func (r captureRule) args() []string {
	proto := proxy.LowerProtocol(r.protocol)
	a := []string{"-m", "comment", "--comment", r.service.String()}
	if r.src.IsValid() {
		a = append(a, "-s", r.src.String())
	}
	if r.dst.IsValid() {
		a = append(a, "-d", netip.PrefixFrom(r.dst, r.dst.BitLen()).String())
	}
	if r.localDst {
		a = append(a, "-m", "addrtype", "--dst-type", "LOCAL")
		if r.protocol == v1.ProtocolTCP {
			a = append(a, "-m", "conntrack", "--ctstate", "NEW")
		}
	}
	if r.action == actionAccept {
		a = append(a, "-m", "conntrack", "--ctstate", "NEW")
	}
	a = append(a, "-p", proto, "-m", proto, "--dport", strconv.Itoa(r.dstPort))
	switch r.action {
	case actionRedirect:
		return append(a, "-j", "REDIRECT", "--to-ports", strconv.Itoa(r.toPort))
	case actionDNAT:
		return append(a, "-j", "DNAT", "--to-destination", netip.AddrPortFrom(r.toAddr, uint16(r.toPort)).String())
	case actionAccept:
		return append(a, "-j", "ACCEPT")
	case actionDrop:
		return append(a, "-j", "DROP")
	default:
		return append(a, "-j", "REJECT")
	}
}

// resolveRules turns a service's rule plans into rules, given the proxy
// port of each of its listeners. Rules whose listener is not open are
// left out (the service's error says why).
func resolveRules(plan *servicePlan, ports map[listenerID]int, listen, hostIP netip.Addr) []captureRule {
	var out []captureRule
	accepted := map[int]bool{}
	for _, rp := range plan.rules {
		r := captureRule{table: rp.table, chain: rp.chain, service: plan.name, protocol: plan.protocol, src: rp.src, dst: rp.dst, dstPort: rp.dstPort}
		if rp.table == xtables.TableFilter && !rp.byPort {
			r.action = actionDrop
			out = append(out, r)
			continue
		}
		port, ok := ports[rp.target]
		if !ok {
			continue
		}
		if rp.table == xtables.TableFilter {
			r.localDst, r.dstPort = true, port
			r.action = actionReject
			if rp.verdict == verdictDrop {
				r.action = actionDrop
			}
			out = append(out, r)
			continue
		}
		r.toPort = port
		host := rp.chain == ChainPortalsHost || rp.chain == ChainNodePortHost
		switch {
		case !listen.IsUnspecified():
			r.action, r.toAddr = actionDNAT, listen
		case host && hostIP.IsValid():
			r.action, r.toAddr = actionDNAT, hostIP
		default:
			r.action = actionRedirect
		}
		out = append(out, r)
		if rp.chain == ChainNodePortContainer && !accepted[port] {
			accepted[port] = true
			out = append(out, captureRule{table: xtables.TableFilter, chain: ChainNodePortNonLocal, service: plan.name,
				protocol: plan.protocol, dstPort: port, action: actionAccept})
		}
	}
	return out
}

// conntrackFilters returns the UDP conntrack filters that select flows to
// the service addresses and node ports of a plan's capture rules.
func conntrackFilters(plan *servicePlan, dst []conntrack.Filter) []conntrack.Filter {
	if plan == nil || plan.protocol != v1.ProtocolUDP {
		return dst
	}
	for _, r := range plan.rules {
		if r.table != xtables.TableNAT {
			continue
		}
		f := conntrack.Filter{OrigDst: r.dst, OrigDstPort: r.dstPort}
		if !slices.Contains(dst, f) {
			dst = append(dst, f)
		}
	}
	return dst
}

// renderRestore writes iptables-restore input that replaces the contents
// of all our chains with rules (declaring a chain in restore input flushes
// it). Within a chain, rules keep their order; services are sorted.
func renderRestore(buf *bytes.Buffer, rules []captureRule) {
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		fmt.Fprintf(buf, "*%s\n", table)
		var declared []xtables.Chain
		for _, j := range jumpRules {
			if j.Table == table && !slices.Contains(declared, j.To) {
				declared = append(declared, j.To)
				fmt.Fprintf(buf, ":%s - [0:0]\n", j.To)
			}
		}
		for _, c := range canaries {
			if c.table == table {
				buf.WriteString("-A ")
				buf.WriteString(string(c.chain))
				for _, a := range c.args {
					buf.WriteByte(' ')
					buf.WriteString(quoteArg(a))
				}
				buf.WriteByte('\n')
			}
		}
		for _, r := range rules {
			if r.table != table {
				continue
			}
			buf.WriteString("-A ")
			buf.WriteString(string(r.chain))
			for _, a := range r.args() {
				buf.WriteByte(' ')
				buf.WriteString(quoteArg(a))
			}
			buf.WriteByte('\n')
		}
		buf.WriteString("COMMIT\n")
	}
}

// renderChanges writes iptables-restore input that deletes the rules del
// and appends the rules add, leaving every other rule of our chains alone.
func renderChanges(buf *bytes.Buffer, del, add []captureRule) {
	for _, table := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
		fmt.Fprintf(buf, "*%s\n", table)
		for _, set := range []struct {
			op    string
			rules []captureRule
		}{{"-D", del}, {"-A", add}} {
			for _, r := range set.rules {
				if r.table != table {
					continue
				}
				buf.WriteString(set.op)
				buf.WriteByte(' ')
				buf.WriteString(string(r.chain))
				for _, a := range r.args() {
					buf.WriteByte(' ')
					buf.WriteString(quoteArg(a))
				}
				buf.WriteByte('\n')
			}
		}
		buf.WriteString("COMMIT\n")
	}
}

func (r captureRule) equal(o captureRule) bool { return r == o }

func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"';") {
		return a
	}
	return strconv.Quote(a)
}

// sortRules orders rules by table, chain and service, keeping each
// service's own order (its source-specific rules come first).
func sortRules(rules []captureRule) {
	slices.SortStableFunc(rules, func(a, b captureRule) int {
		if c := strings.Compare(string(a.table), string(b.table)); c != 0 {
			return c
		}
		if c := strings.Compare(string(a.chain), string(b.chain)); c != 0 {
			return c
		}
		if c := strings.Compare(a.service.String(), b.service.String()); c != 0 {
			return c
		}
		return strings.Compare(string(a.protocol), string(b.protocol))
	})
}

// ensureJumps creates our chains and hooks them into the built-in ones.
func ensureJumps(ctx context.Context, ipt xtables.Runner) error {
	return xtables.EnsureJumpRules(ctx, ipt, xtables.Append, jumpRules, nil)
}

// CleanupLeftovers removes every chain and rule the userspace proxier
// installs through ipt (whether or not a Proxier is running; stop it first).
// Missing chains are not an error.
func CleanupLeftovers(ctx context.Context, ipt xtables.Runner) error {
	var errs []error
	if err := xtables.DeleteJumpRules(ctx, ipt, jumpRules); err != nil {
		errs = append(errs, err)
	}
	done := map[xtables.Chain]bool{}
	for _, j := range jumpRules {
		if done[j.To] {
			continue
		}
		done[j.To] = true
		exists, err := ipt.ChainExists(ctx, j.Table, j.To)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !exists {
			continue
		}
		if err := ipt.FlushChain(ctx, j.Table, j.To); err != nil {
			errs = append(errs, fmt.Errorf("flushing %s/%s: %w", j.Table, j.To, err))
			continue
		}
		if err := ipt.DeleteChain(ctx, j.Table, j.To); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s/%s: %w", j.Table, j.To, err))
		}
	}
	return errors.Join(errs...)
}
