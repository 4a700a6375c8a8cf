package userspace

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// dryRun is Hooks.DryRun: the plan of every service port as text, one
// block per port sorted by name: its endpoint sets, the proxy sockets it
// needs (with the address of the one already open, if any) and, in
// CaptureIPTables mode, its capture rules. Nothing is opened, closed or
// written, and the engine's record of what it applied is untouched.
func (p *Proxier) dryRun(_ context.Context, req *engine.Request) (string, error) {
	p.stateMu.Lock()
	defer p.stateMu.Unlock()
	u := req.Update
	pp := planParams{
		capture: p.cfg.Capture, listen: p.cfg.ListenAddress, nodeName: p.cfg.NodeName, nodeLabels: u.NodeLabels,
		clusterCIDRs: p.cfg.ClusterCIDRs,
	}
	names := make([]proxy.ServicePortName, 0, len(u.Services))
	for name := range u.Services {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b proxy.ServicePortName) int { return strings.Compare(a.String(), b.String()) })

	var b strings.Builder
	fmt.Fprintf(&b, "# userspace %s: capture %s, listen %s", p.cfg.IPFamily, p.cfg.Capture, p.cfg.ListenAddress)
	if p.cfg.Capture == CaptureIPTables && p.hostIP.IsValid() {
		fmt.Fprintf(&b, ", host IP %s", p.hostIP)
	}
	b.WriteByte('\n')
	for _, name := range names {
		plan, err := planService(name, u.Services[name], u.Endpoints[name], pp)
		if err != nil {
			fmt.Fprintf(&b, "service %s: not served: %v\n", name, err)
			continue
		}
		fmt.Fprintf(&b, "service %s\n", name)
		for _, f := range plan.frontends {
			fmt.Fprintf(&b, "  set %s: %s%s\n", setName(f.key), addrList(f.endpoints), affinityText(f.affinity))
		}
		var open map[listenerID]*listenerState
		if st := p.svc.services[name]; st != nil {
			open = st.listeners
		}
		for _, id := range plan.listeners {
			fmt.Fprintf(&b, "  socket %s\n", listenerText(id, open[id]))
		}
		for _, r := range plan.rules {
			fmt.Fprintf(&b, "  rule %s\n", rulePlanText(r, open[r.target]))
		}
	}
	return b.String(), nil
}

func setName(k BalancerKey) string {
	if k.Local {
		return "local"
	}
	return "cluster"
}

func addrList(eps []netip.AddrPort) string {
	if len(eps) == 0 {
		return "(none)"
	}
	parts := make([]string, len(eps))
	for i, ep := range eps {
		parts[i] = ep.String()
	}
	return strings.Join(parts, " ")
}

func affinityText(a Affinity) string {
	if !a.ClientIP {
		return ""
	}
	return fmt.Sprintf(" (affinity ClientIP, %s)", a.Timeout)
}

func listenerText(id listenerID, open *listenerState) string {
	var at string
	if id.kind == listenFixed {
		at = id.bind.String()
	} else {
		at = "proxy port"
	}
	state := "to open"
	if open != nil {
		state = "open at " + open.sock.Addr().String()
	}
	return fmt.Sprintf("%s %s for the %s set (%s)", id.protocol, at, setName(id.key), state)
}

func rulePlanText(r rulePlan, open *listenerState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.table, r.chain)
	if r.src.IsValid() {
		fmt.Fprintf(&b, " -s %s", r.src)
	}
	if r.dst.IsValid() {
		fmt.Fprintf(&b, " -d %s", r.dst)
	} else if !r.byPort {
		b.WriteString(" (local destination)")
	}
	if r.dstPort != 0 {
		fmt.Fprintf(&b, " --dport %d", r.dstPort)
	}
	target := "the " + setName(r.target.key) + " set's proxy port"
	if open != nil {
		target += fmt.Sprintf(" %d", open.sock.Addr().Port())
	}
	switch {
	case r.byPort && r.verdict == verdictDrop:
		fmt.Fprintf(&b, " new connections to %s: DROP", target)
	case r.byPort:
		fmt.Fprintf(&b, " new connections to %s: REJECT", target)
	case r.table == "filter":
		b.WriteString(": DROP")
	default:
		fmt.Fprintf(&b, ": redirect to %s", target)
	}
	return b.String()
}
