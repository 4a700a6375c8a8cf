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

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
)

// The chains of kube-proxy's old userspace mode, plus one filter chain of ours.
const (
	// ChainPortalsContainer (nat, from PREROUTING) redirects service
	// addresses for traffic from pods and the outside.
	ChainPortalsContainer iptables.Chain = "KUBE-PORTALS-CONTAINER"
	// ChainPortalsHost (nat, from OUTPUT) does the same for traffic the node sends.
	ChainPortalsHost iptables.Chain = "KUBE-PORTALS-HOST"
	// ChainNodePortContainer (nat, from PREROUTING, destination local) redirects node ports.
	ChainNodePortContainer iptables.Chain = "KUBE-NODEPORT-CONTAINER"
	// ChainNodePortHost (nat, from OUTPUT, destination local) does the same for the node.
	ChainNodePortHost iptables.Chain = "KUBE-NODEPORT-HOST"
	// ChainNodePortNonLocal (filter, from INPUT) accepts traffic to node-port proxy sockets.
	ChainNodePortNonLocal iptables.Chain = "KUBE-NODEPORT-NON-LOCAL"
	// ChainFilter (filter, from INPUT and FORWARD) rejects new connections
	// to proxy sockets whose service has no endpoints, drops them when the
	// service has endpoints but none under the socket's traffic policy, and
	// drops load-balancer traffic from outside loadBalancerSourceRanges.
	// The old userspace mode had no equivalent.
	ChainFilter iptables.Chain = "KUBE-USERSPACE-FILTER"
)

// jumpRule hooks one of our chains into a built-in chain.
type jumpRule struct {
	table iptables.Table
	from  iptables.Chain
	to    iptables.Chain
	args  []string
}

// jumpRules are in the order they are appended: cluster-IP portals before
// node ports, so a node port never shadows a service address; our filter
// chain before the node-port ACCEPTs.
var jumpRules = []jumpRule{
	{iptables.TableNAT, iptables.ChainPrerouting, ChainPortalsContainer,
		[]string{"-m", "comment", "--comment", "handle ClusterIPs; NOTE: this must be before the NodePort rules", "-j", string(ChainPortalsContainer)}},
	{iptables.TableNAT, iptables.ChainOutput, ChainPortalsHost,
		[]string{"-m", "comment", "--comment", "handle ClusterIPs; NOTE: this must be before the NodePort rules", "-j", string(ChainPortalsHost)}},
	{iptables.TableNAT, iptables.ChainPrerouting, ChainNodePortContainer,
		[]string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "handle service NodePorts; NOTE: this must be the last rule in the chain", "-j", string(ChainNodePortContainer)}},
	{iptables.TableNAT, iptables.ChainOutput, ChainNodePortHost,
		[]string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "handle service NodePorts; NOTE: this must be the last rule in the chain", "-j", string(ChainNodePortHost)}},
	{iptables.TableFilter, iptables.ChainInput, ChainFilter,
		[]string{"-m", "comment", "--comment", "userspace proxy: no endpoints, source ranges", "-j", string(ChainFilter)}},
	{iptables.TableFilter, iptables.ChainForward, ChainFilter,
		[]string{"-m", "comment", "--comment", "userspace proxy: no endpoints, source ranges", "-j", string(ChainFilter)}},
	{iptables.TableFilter, iptables.ChainInput, ChainNodePortNonLocal,
		[]string{"-m", "comment", "--comment", "Ensure that non-local NodePort traffic can flow", "-j", string(ChainNodePortNonLocal)}},
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
	table    iptables.Table
	chain    iptables.Chain
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
	proto := strings.ToLower(string(r.protocol))
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
		if rp.table == iptables.TableFilter && !rp.byPort {
			r.action = actionDrop
			out = append(out, r)
			continue
		}
		port, ok := ports[rp.target]
		if !ok {
			continue
		}
		if rp.table == iptables.TableFilter {
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
			out = append(out, captureRule{table: iptables.TableFilter, chain: ChainNodePortNonLocal, service: plan.name,
				protocol: plan.protocol, dstPort: port, action: actionAccept})
		}
	}
	return out
}

// conntrackFilters returns the UDP conntrack filters that select flows to
// the service addresses and node ports of a plan's capture rules.
func conntrackFilters(plan *servicePlan, dst []ConntrackFilter) []ConntrackFilter {
	if plan == nil || plan.protocol != v1.ProtocolUDP {
		return dst
	}
	for _, r := range plan.rules {
		if r.table != iptables.TableNAT {
			continue
		}
		f := ConntrackFilter{OrigDst: r.dst, OrigDstPort: r.dstPort}
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
	for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter} {
		fmt.Fprintf(buf, "*%s\n", table)
		var declared []iptables.Chain
		for _, j := range jumpRules {
			if j.table == table && !slices.Contains(declared, j.to) {
				declared = append(declared, j.to)
				fmt.Fprintf(buf, ":%s - [0:0]\n", j.to)
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
	for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter} {
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
func ensureJumps(ctx context.Context, ipt iptables.Runner) error {
	for _, j := range jumpRules {
		if _, err := ipt.EnsureChain(ctx, j.table, j.to); err != nil {
			return fmt.Errorf("creating %s/%s: %w", j.table, j.to, err)
		}
		if _, err := ipt.EnsureRule(ctx, iptables.Append, j.table, j.from, j.args...); err != nil {
			return fmt.Errorf("hooking %s/%s into %s: %w", j.table, j.to, j.from, err)
		}
	}
	return nil
}

// CleanupLeftovers removes every chain and rule the userspace proxier
// installs through ipt (whether or not a Proxier is running; stop it first).
// Missing chains are not an error.
func CleanupLeftovers(ctx context.Context, ipt iptables.Runner) error {
	var errs []error
	for _, j := range jumpRules {
		if err := ipt.DeleteRule(ctx, j.table, j.from, j.args...); err != nil {
			errs = append(errs, fmt.Errorf("unhooking %s/%s from %s: %w", j.table, j.to, j.from, err))
		}
	}
	done := map[iptables.Chain]bool{}
	for _, j := range jumpRules {
		if done[j.to] {
			continue
		}
		done[j.to] = true
		exists, err := ipt.ChainExists(ctx, j.table, j.to)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !exists {
			continue
		}
		if err := ipt.FlushChain(ctx, j.table, j.to); err != nil {
			errs = append(errs, fmt.Errorf("flushing %s/%s: %w", j.table, j.to, err))
			continue
		}
		if err := ipt.DeleteChain(ctx, j.table, j.to); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s/%s: %w", j.table, j.to, err))
		}
	}
	return errors.Join(errs...)
}
