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

// The chains of kube-proxy's old userspace mode.
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
)

// jumpRule hooks one of our chains into a built-in chain.
type jumpRule struct {
	table iptables.Table
	from  iptables.Chain
	to    iptables.Chain
	args  []string
}

// jumpRules are in the order they are appended: cluster-IP portals before
// node ports, so a node port never shadows a service address.
var jumpRules = []jumpRule{
	{iptables.TableNAT, iptables.ChainPrerouting, ChainPortalsContainer,
		[]string{"-m", "comment", "--comment", "handle ClusterIPs; NOTE: this must be before the NodePort rules", "-j", string(ChainPortalsContainer)}},
	{iptables.TableNAT, iptables.ChainOutput, ChainPortalsHost,
		[]string{"-m", "comment", "--comment", "handle ClusterIPs; NOTE: this must be before the NodePort rules", "-j", string(ChainPortalsHost)}},
	{iptables.TableNAT, iptables.ChainPrerouting, ChainNodePortContainer,
		[]string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "handle service NodePorts; NOTE: this must be the last rule in the chain", "-j", string(ChainNodePortContainer)}},
	{iptables.TableNAT, iptables.ChainOutput, ChainNodePortHost,
		[]string{"-m", "addrtype", "--dst-type", "LOCAL", "-m", "comment", "--comment", "handle service NodePorts; NOTE: this must be the last rule in the chain", "-j", string(ChainNodePortHost)}},
	{iptables.TableFilter, iptables.ChainInput, ChainNodePortNonLocal,
		[]string{"-m", "comment", "--comment", "Ensure that non-local NodePort traffic can flow", "-j", string(ChainNodePortNonLocal)}},
}

// captureRule is one rule of our chains, kept structured for the tracer.
type captureRule struct {
	table    iptables.Table
	chain    iptables.Chain
	service  proxy.ServicePortName
	protocol v1.Protocol
	dst      netip.Addr // invalid: any (node-port rules)
	dstPort  int
	// target: REDIRECT to toPort when toAddr is invalid, else DNAT to
	// toAddr:toPort; ACCEPT for the filter rules.
	toAddr netip.Addr
	toPort int
}

// args renders the rule as iptables arguments (after "-A chain").
func (r captureRule) args() []string {
	proto := strings.ToLower(string(r.protocol))
	if r.table == iptables.TableFilter {
		return []string{"-m", "comment", "--comment", r.service.String(), "-m", "state", "--state", "NEW",
			"-p", proto, "-m", proto, "--dport", strconv.Itoa(r.toPort), "-j", "ACCEPT"}
	}
	a := []string{"-m", "comment", "--comment", r.service.String(), "-p", proto, "-m", proto}
	if r.dst.IsValid() {
		a = append(a, "-d", netip.PrefixFrom(r.dst, r.dst.BitLen()).String())
	}
	a = append(a, "--dport", strconv.Itoa(r.dstPort))
	if !r.toAddr.IsValid() {
		return append(a, "-j", "REDIRECT", "--to-ports", strconv.Itoa(r.toPort))
	}
	return append(a, "-j", "DNAT", "--to-destination", netip.AddrPortFrom(r.toAddr, uint16(r.toPort)).String())
}

// captureRules computes the rules for one proxy socket bound at port.
// listen is Config.ListenAddress and hostIP the DNAT target for
// node-originated traffic (invalid: REDIRECT).
func captureRules(name proxy.ServicePortName, lp listenerPlan, port int, listen, hostIP netip.Addr) []captureRule {
	var containerTo, hostTo netip.Addr
	if !listen.IsUnspecified() {
		containerTo, hostTo = listen, listen
	} else {
		hostTo = hostIP
	}
	var rules []captureRule
	for _, vip := range lp.portals {
		base := captureRule{table: iptables.TableNAT, service: name, protocol: lp.id.protocol, dst: vip.Addr(), dstPort: int(vip.Port()), toPort: port}
		c, h := base, base
		c.chain, c.toAddr = ChainPortalsContainer, containerTo
		h.chain, h.toAddr = ChainPortalsHost, hostTo
		rules = append(rules, c, h)
	}
	if lp.nodePort > 0 {
		base := captureRule{table: iptables.TableNAT, service: name, protocol: lp.id.protocol, dstPort: lp.nodePort, toPort: port}
		c, h := base, base
		c.chain, c.toAddr = ChainNodePortContainer, containerTo
		h.chain, h.toAddr = ChainNodePortHost, hostTo
		f := captureRule{table: iptables.TableFilter, chain: ChainNodePortNonLocal, service: name, protocol: lp.id.protocol, toPort: port}
		rules = append(rules, c, h, f)
	}
	return rules
}

// renderRestore writes iptables-restore input that replaces the contents of
// all our chains with rules (declaring a chain in restore input flushes it).
func renderRestore(buf *bytes.Buffer, rules []captureRule) {
	for _, table := range []iptables.Table{iptables.TableNAT, iptables.TableFilter} {
		fmt.Fprintf(buf, "*%s\n", table)
		for _, j := range jumpRules {
			if j.table == table {
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

func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"';") {
		return a
	}
	return strconv.Quote(a)
}

// sortRules orders rules deterministically (chain, then service, then destination).
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
		if c := strings.Compare(string(a.protocol), string(b.protocol)); c != 0 {
			return c
		}
		if c := a.dst.Compare(b.dst); c != 0 {
			return c
		}
		return a.dstPort - b.dstPort
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
			errs = append(errs, fmt.Errorf("unhooking %s/%s: %w", j.table, j.to, err))
		}
	}
	for _, j := range jumpRules {
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
