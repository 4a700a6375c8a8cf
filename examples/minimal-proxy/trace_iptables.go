package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// iptablesSaveTools are the save tools of each backend, by family.
func iptablesSaveTools(backend string, v6 bool) string {
	prefix := "iptables"
	if v6 {
		prefix = "ip6tables"
	}
	return prefix + "-" + backend + "-save"
}

// readIPTables runs the backend's save tool (backend "" picks the one
// holding kube-proxy's chains) and returns its text, the backend read and
// notes for the report.
func readIPTables(ctx context.Context, backend string, v6 bool, run toolRunner) (text, used, cmd string, notes []string, err error) {
	backends := []string{backend}
	if backend == "" {
		backends = []string{"nft", "legacy"}
	}
	type dump struct{ backend, cmd, text string }
	var found, empty []dump
	var errs []error
	for _, b := range backends {
		tool := iptablesSaveTools(b, v6)
		out, err := run(ctx, tool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d := dump{b, tool, string(out)}
		if strings.Contains(d.text, ":KUBE-SERVICES ") {
			found = append(found, d)
		} else {
			empty = append(empty, d)
		}
	}
	switch {
	case len(found) > 0:
		if len(found) > 1 {
			notes = append(notes, fmt.Sprintf("both iptables backends hold kube-proxy chains; traced the %s one (the other may be a leftover): choose with --iptables-backend", found[0].backend))
		}
		return found[0].text, found[0].backend, found[0].cmd, notes, nil
	case len(empty) > 0:
		notes = append(notes, fmt.Sprintf("no KUBE-SERVICES chain in %s's output: no service proxy has written iptables rules here (try --proxy-mode nftables or ipvs)", empty[0].cmd))
		return empty[0].text, empty[0].backend, empty[0].cmd, notes, nil
	}
	return "", "", "", nil, fmt.Errorf("cannot read the iptables rules: %w", errors.Join(errs...))
}

// traceIPTables reads the iptables rules and traces p through them.
func traceIPTables(ctx context.Context, backend string, p proxytest.Packet, node *nodeView, run toolRunner) (*traceReport, error) {
	text, used, cmd, notes, err := readIPTables(ctx, backend, p.Dst.Is6(), run)
	if err != nil {
		return nil, err
	}
	rep, err := traceIPTablesDump(text, p, node, nil)
	if err != nil {
		return nil, err
	}
	rep.Dataplane = "iptables (" + used + " backend)"
	rep.Read = append([]string{cmd}, rep.Read...)
	rep.Notes = append(notes, rep.Notes...)
	return rep, nil
}

// iptablesTracerConfig describes the node to the iptables tracer.
func iptablesTracerConfig(p proxytest.Packet, node *nodeView, ipsets func(q iptablestest.IPSetQuery) (bool, error)) iptablestest.TracerConfig {
	v6 := p.Dst.Is6()
	cfg := iptablestest.TracerConfig{
		NodeIPs:           slices.Clone(node.Addrs),
		ExternalInterface: node.defaultInterface(v6),
		SourceInterfaces:  map[netip.Addr]string{},
		IPSetMatch:        ipsets,
	}
	if cfg.ExternalInterface == "" {
		cfg.ExternalInterface = "eth0"
	}
	for _, r := range node.Routes {
		if r.Prefix.Addr().Is6() == v6 {
			cfg.Routes = append(cfg.Routes, iptablestest.Route{Prefix: r.Prefix, Interface: r.Interface})
		}
	}
	if p.Origin != proxytest.FromNode {
		in := node.interfaceFor(p.Src)
		if in == "" {
			in = cfg.ExternalInterface
		}
		cfg.SourceInterfaces[p.Src] = in
		cfg.PodInterface = in
	}
	return cfg
}

// traceIPTablesDump loads iptables-save text into the iptables fake and
// traces p with its tracer. ipsets answers -m set matches (ipvs mode).
func traceIPTablesDump(text string, p proxytest.Packet, node *nodeView, ipsets func(q iptablestest.IPSetQuery) (bool, error)) (*traceReport, error) {
	family := v1.IPv4Protocol
	if p.Dst.Is6() {
		family = v1.IPv6Protocol
	}
	fake, err := iptablestest.NewFakeFromDump(family, text)
	if err != nil {
		return nil, fmt.Errorf("loading the iptables rules into svcproxy's fake: %w", err)
	}
	sysctl := iptablestest.NewSysctl(nil)
	if node.RouteLocalnet {
		_ = sysctl.Set(iptables.SysctlRouteLocalnet, 1)
	}
	tr := iptablestest.NewTracer(&iptablestest.Fakes{IPTables: fake, Sysctl: sysctl}, iptablesTracerConfig(p, node, ipsets))
	all, err := tr.TraceAll(p)
	if err != nil {
		if errors.Is(err, iptablestest.ErrUnsupported) {
			return nil, fmt.Errorf("a rule on this packet's way is one svcproxy's tracer does not model (a foreign rule?), so it cannot say what happens: %w", err)
		}
		return nil, err
	}
	rep := &traceReport{Packet: newPacketReport(p)}
	res, rerr := all.Result()
	var amb *iptablestest.AmbiguousError
	switch {
	case errors.As(rerr, &amb):
		rep.Result = "ambiguous"
		rep.Notes = append(rep.Notes, "the paths end differently (some forward, some drop or reject): the rules make the outcome random")
	case rerr != nil:
		return nil, rerr
	default:
		rep.fillResult(res)
	}
	// Paths in backend order, for a stable report.
	slices.SortStableFunc(all.Paths, func(a, b iptablestest.Path) int { return a.Backend.Compare(b.Backend) })
	probs := newChainProbabilities(fake)
	reach := map[netip.AddrPort]*reachReport{}
	unknownProb := false
	for _, path := range all.Paths {
		pr := pathReport{Verdict: verdictWord(path.Verdict), Masquerade: path.Masquerade, Sticky: path.Sticky, Local: path.Local, Steps: path.Rules}
		if path.Backend.IsValid() {
			pr.Backend = path.Backend.String()
		}
		prob, affinity, known := probs.of(path.Rules)
		pr.Affinity = affinity
		if known && !affinity {
			pr.Probability = formatProbability(prob)
		}
		pr.Services = servicesOf(path.Rules)
		rep.Paths = append(rep.Paths, pr)
		if path.Verdict != proxytest.Forwarded {
			continue
		}
		r := reach[path.Backend]
		if r == nil {
			r = &reachReport{Backend: path.Backend.String(), Probability: new(float64)}
			reach[path.Backend] = r
		}
		r.Services = appendNew(r.Services, pr.Services...)
		if !affinity {
			if !known {
				unknownProb = true
			}
			*r.Probability += prob
		}
	}
	if rep.Result == "forwarded" {
		rep.Reach = nil
		for _, b := range res.Backends {
			r := reach[b]
			if unknownProb {
				r.Probability = nil
			} else {
				r.Probability = formatProbability(*r.Probability)
			}
			rep.Reach = append(rep.Reach, *r)
		}
		if unknownProb {
			rep.Notes = append(rep.Notes, "a random match other than statistic --mode random decides between paths: probabilities left out")
		}
	}
	return rep, nil
}

// chainProbabilities computes a path's probability from the statistic
// matches in the chains it went through.
type chainProbabilities struct {
	fake  *iptablestest.Fake
	rules map[string][]string // "table chain" -> rules
}

func newChainProbabilities(f *iptablestest.Fake) *chainProbabilities {
	return &chainProbabilities{fake: f, rules: map[string][]string{}}
}

func (c *chainProbabilities) chain(table, chain string) []string {
	key := table + " " + chain
	if r, ok := c.rules[key]; ok {
		return r
	}
	r, _ := c.fake.Rules(xtables.Table(table), xtables.Chain(chain))
	c.rules[key] = r
	return r
}

// of returns the probability of the path whose steps are given (the
// tracer's "table CHAIN: rule" lines), whether it depends on an
// affinity record (a "recent --rcheck/--update" hit), and whether the
// probability is known (only statistic --mode random is modelled). A
// hit rule with a statistic match contributes its probability; every
// statistic rule of the same chain before it that the path passed,
// its complement.
func (c *chainProbabilities) of(steps []string) (prob float64, affinity, known bool) {
	prob, known = 1, true
	last := map[string]int{} // "table chain" -> index of the last hit rule
	for _, s := range steps {
		table, rest, ok := strings.Cut(s, " ")
		if !ok {
			continue
		}
		chain, rule, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		if strings.Contains(rule, "--rcheck") || strings.Contains(rule, "--update") {
			affinity = true
		}
		rules := c.chain(table, chain)
		key := table + " " + chain
		from, seen := last[key]
		if !seen {
			from = -1
		}
		i := -1
		for j := from + 1; j < len(rules); j++ {
			if rules[j] == rule {
				i = j
				break
			}
		}
		if i < 0 {
			continue // a policy line, or a martian note
		}
		for j := from + 1; j <= i; j++ {
			p, isStat, ok := statisticProbability(rules[j])
			if !isStat {
				continue
			}
			if !ok {
				known = false
				continue
			}
			if j == i {
				prob *= p
			} else {
				prob *= 1 - p
			}
		}
		last[key] = i
	}
	return prob, affinity, known
}

// statisticProbability reads "-m statistic --mode random --probability P".
func statisticProbability(rule string) (p float64, isStatistic, ok bool) {
	if !strings.Contains(rule, "-m statistic") {
		return 0, false, false
	}
	f := strings.Fields(rule)
	i := slices.Index(f, "--probability")
	if i < 0 || i+1 >= len(f) || !slices.Contains(f, "random") {
		return 0, true, false
	}
	p, err := strconv.ParseFloat(f[i+1], 64)
	if err != nil {
		return 0, true, false
	}
	if slices.Contains(f[:i], "!") && f[i-1] == "!" {
		p = 1 - p
	}
	return p, true, true
}

// servicesOf names the Services the steps' comments belong to: the
// "namespace/name:port" that kube-proxy's and svcproxy's comments start
// with, in order of first appearance.
func servicesOf(steps []string) []string {
	var out []string
	for _, s := range steps {
		if svc := serviceInComment(s); svc != "" {
			out = appendNew(out, svc)
		}
	}
	return out
}

// serviceInComment extracts the service port name from a rule's comment
// (iptables --comment "…", nftables comment "…").
func serviceInComment(rule string) string {
	var c string
	for _, key := range []string{"--comment ", "comment "} {
		i := strings.Index(rule, key)
		if i < 0 {
			continue
		}
		c = strings.TrimSpace(rule[i+len(key):])
		break
	}
	if c == "" {
		return ""
	}
	if strings.HasPrefix(c, `"`) {
		c = c[1:]
		if j := strings.IndexByte(c, '"'); j >= 0 {
			c = c[:j]
		}
	}
	tok, _, _ := strings.Cut(c, " ")
	ns, name, ok := strings.Cut(tok, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return ""
	}
	if _, err := netip.ParsePrefix(tok); err == nil {
		return ""
	}
	if strings.HasPrefix(ns, "-") || strings.ContainsAny(tok, `"\`) {
		return ""
	}
	return tok
}

func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// readRouteLocalnet reads net.ipv4.conf.all.route_localnet.
func readRouteLocalnet() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/route_localnet")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
