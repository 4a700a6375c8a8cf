package winkernel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// dryRun is Hooks.DryRun: the HNS objects a full sync would hold, as text
// (one line per remote endpoint and load balancer, grouped by service
// port), from a read-only look at the network and its endpoints. Nothing
// is written and the engine's view is not changed.
func (p *Proxier) dryRun(_ context.Context, req *engine.Request) (string, error) {
	n, eps, err := listNetwork(p.hns, p.cfg.NetworkName)
	if err != nil {
		return "", err
	}
	saved := p.st
	defer func() { p.st = saved }()
	p.st.network = n
	p.st.endpoints = map[netip.Addr]endpointRef{}
	p.st.rootIP = netip.Addr{}
	for i := range eps {
		ep := &eps[i]
		if !ep.Remote && ep.Name == p.cfg.RootHNSEndpointName {
			p.st.rootIP = ep.IP
		}
		if prev, ok := p.st.endpoints[ep.IP]; !ok || prev.Remote {
			p.st.endpoints[ep.IP] = refOf(ep)
		}
	}
	env := p.env(req.Update.NodeLabels)
	return renderPlan(env, p.cfg, req.Update.Services, req.Update.Endpoints), nil
}

// renderPlan renders the planned HNS objects of every service port.
func renderPlan(env *planEnv, cfg Config, services map[proxy.ServicePortName]proxy.ServicePort,
	endpoints map[proxy.ServicePortName][]proxy.Endpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# network %s", cfg.NetworkName)
	if env.network != nil {
		fmt.Fprintf(&b, " (%s)", env.network.Type)
	}
	b.WriteByte('\n')
	if env.overlay && cfg.SourceVIP.IsValid() {
		fmt.Fprintf(&b, "endpoint %s local source-vip pa=%s\n", cfg.SourceVIP, env.nodeIP)
	}
	names := make([]proxy.ServicePortName, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	for _, name := range names {
		plan := planServicePort(env, services[name], endpoints[name])
		fmt.Fprintf(&b, "# %s\n", name)
		for _, r := range plan.Remotes {
			fmt.Fprintf(&b, "endpoint %s remote", r.IP)
			if r.ProviderAddress.IsValid() {
				fmt.Fprintf(&b, " pa=%s", r.ProviderAddress)
			}
			fmt.Fprintf(&b, " mac=%s\n", r.MAC)
		}
		for _, lb := range plan.LBs {
			b.WriteString(renderWant(&lb))
		}
		for _, s := range plan.Skipped {
			fmt.Fprintf(&b, "# skipped %s\n", s)
		}
	}
	return b.String()
}

func renderWant(lb *wantLB) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lb %s %s ->", lb.Key, lb.Kind)
	for _, be := range lb.Backends {
		fmt.Fprintf(&b, " %s", netip.AddrPortFrom(be.IP, lb.InternalPort))
	}
	src := "none"
	if lb.SourceVIP.IsValid() {
		src = lb.SourceVIP.String()
	}
	dist := "none"
	if lb.Distribution == DistributionSourceIP {
		dist = "source-ip"
	}
	fmt.Fprintf(&b, " src=%s flags=%s dist=%s\n", src, lb.Flags, dist)
	return b.String()
}

// cleanup is Hooks.Cleanup: delete every load balancer that is ours by
// the ownership rule (see ownsLB) and every remote endpoint of our network
// that we created (named with RemoteEndpointNamePrefix) or used. Local
// endpoints and other load balancers are left alone.
func (p *Proxier) cleanup(context.Context) error {
	hs, err := ListState(p.hns, p.cfg.NetworkName)
	if err != nil {
		return err
	}
	eps, lbs := hs.Endpoints, hs.LoadBalancers
	owners := p.ownership(hs.Network, eps)
	var errs []error
	for _, lb := range lbs {
		if !p.ownsLB(&lb, owners) {
			continue
		}
		if err := p.hns.DeleteLoadBalancer(lb.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting load balancer %s: %w", lb.Key(), err))
		}
	}
	for _, ep := range eps {
		if !ep.Remote || !(hasPrefix(ep.Name, RemoteEndpointNamePrefix) || p.st.referenced[ep.IP]) {
			continue
		}
		if err := p.hns.DeleteEndpoint(ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("deleting remote endpoint %s: %w", ep.IP, err))
		}
	}
	if len(errs) == 0 {
		p.st.reset()
	}
	return joinErrs(errs)
}
