package iptables

import (
	"net/netip"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// sharedChain indexes the fixed chains into which every service puts a few
// rules (its "dispatch" rules). Their order inside the chain carries no
// meaning (each matches its own destination), which is what lets a partial
// sync add and delete them one by one instead of rewriting the chain.
type sharedChain int

const (
	natServices sharedChain = iota
	natNodePorts
	filterServices
	filterExternalServices
	filterNodePorts
	filterFirewall
	numShared
)

var sharedChains = [numShared]struct {
	table xtables.Table
	chain xtables.Chain
	// insert: new rules go first (-I), to stay ahead of the tail rule that
	// must remain last in nat KUBE-SERVICES.
	insert bool
}{
	natServices:            {xtables.TableNAT, xtables.ChainKubeServices, true},
	natNodePorts:           {xtables.TableNAT, ChainKubeNodePorts, false},
	filterServices:         {xtables.TableFilter, xtables.ChainKubeServices, false},
	filterExternalServices: {xtables.TableFilter, ChainKubeExternalServices, false},
	filterNodePorts:        {xtables.TableFilter, ChainKubeNodePorts, false},
	filterFirewall:         {xtables.TableFilter, xtables.ChainKubeProxyFirewall, false},
}

// servicePlan is the desired state of one service port, apart from the
// rules of its own chains, which planService streams into a lineWriter.
type servicePlan struct {
	// shared holds, per fixed chain, this service's rules there: the
	// match and target, without "-A CHAIN".
	shared [numShared][]string
	// chains are the nat chains this service port owns (KUBE-SVC/SVL/EXT/
	// FW/SEP), in the order they are declared.
	chains []xtables.Chain
	// sticky records ClientIP affinity, on which the KUBE-SEP chains'
	// content depends.
	sticky bool
	// decl are the chains whose rules planService wrote (transient: the
	// render declares them, then drops the slice). A KUBE-SEP chain that
	// exists with the same content is kept, not rewritten.
	decl []xtables.Chain
}

func (p *servicePlan) reset() {
	for i := range p.shared {
		p.shared[i] = p.shared[i][:0]
	}
	p.chains = p.chains[:0]
	p.decl = p.decl[:0]
}

// planEnv is everything besides the service and its endpoints that a
// service's rules depend on. It changes only with the node or the config,
// and then every service is planned again (a full sync).
type planEnv struct {
	nodeName      string
	nodeLabels    map[string]string
	nodeIP        netip.Addr
	masqueradeAll bool
	// ifLocal / ifNotLocal are the local-detector matches (nil: none).
	ifLocal, ifNotLocal []string
	masqMark            string // "0x4000"
	// keepEndpointChains, when set, are KUBE-SEP chains that exist with the
	// content planService would write (partial syncs).
	keepEndpointChains []xtables.Chain
	// terse leaves out the per-endpoint comments (large clusters).
	terse bool
	spec  specBuilder

	// localhostNodePorts: node ports are served on 127.0.0.0/8 (localhost_nodeports.go).
	localhostNodePorts bool
	// probabilities caches the statistic match's values by endpoint count
	// left (probability).
	probabilities []string
}

// decision is the per-service routing decision of kube-proxy's iptables
// mode: which chains exist and where each kind of traffic goes.
type decision struct {
	clusterEndpoints, localEndpoints, reachable []proxy.Endpoint

	hasEndpoints bool

	usesClusterChain bool
	usesLocalChain   bool

	// internal (cluster IP) traffic
	internalChain        xtables.Chain
	hasInternalEndpoints bool
	// external (node port, external IP, load balancer) traffic
	externalPolicyChain  xtables.Chain
	hasExternalEndpoints bool
	usesExternalChain    bool
	// load-balancer traffic enters the firewall chain when source ranges apply
	loadBalancerChain xtables.Chain
	usesFirewallChain bool

	// filter-table verdicts for traffic with nowhere to go
	internalFilterTarget, internalFilterWhy string
	externalFilterTarget, externalFilterWhy string
}

const (
	whyNoEndpoints      = " has no endpoints"
	whyNoLocalEndpoints = " has no local endpoints"
)

func decide(env *planEnv, svc *servicePortInfo, endpoints []proxy.Endpoint) decision {
	var d decision
	d.clusterEndpoints, d.localEndpoints, d.reachable, d.hasEndpoints =
		proxy.CategorizeEndpointsShared(endpoints, svc, env.nodeName, env.nodeLabels)

	d.usesClusterChain = len(d.clusterEndpoints) > 0 && svc.UsesClusterEndpoints()
	d.usesLocalChain = len(d.localEndpoints) > 0 && svc.UsesLocalEndpoints()

	d.internalChain = svc.chains.cluster
	d.hasInternalEndpoints = d.hasEndpoints
	if svc.InternalPolicyLocal() {
		d.internalChain = svc.chains.local
		d.hasInternalEndpoints = len(d.localEndpoints) > 0
	}
	d.externalPolicyChain = svc.chains.cluster
	d.hasExternalEndpoints = d.hasEndpoints
	if svc.ExternalPolicyLocal() {
		d.externalPolicyChain = svc.chains.local
		d.hasExternalEndpoints = len(d.localEndpoints) > 0
	}
	// The EXT chain is needed even without external endpoints, for the
	// short-circuit of traffic from local pods and the node.
	d.usesExternalChain = d.hasEndpoints && svc.ExternallyAccessible()

	d.loadBalancerChain = svc.chains.external
	d.usesFirewallChain = d.hasEndpoints && len(svc.LoadBalancerVIPs()) > 0 && len(svc.LoadBalancerSourceRanges()) > 0
	if d.usesFirewallChain {
		d.loadBalancerChain = svc.chains.firewall
	}

	if !d.hasEndpoints {
		d.internalFilterTarget, d.internalFilterWhy = "REJECT", whyNoEndpoints
		d.externalFilterTarget, d.externalFilterWhy = "REJECT", whyNoEndpoints
	} else {
		if !d.hasInternalEndpoints {
			d.internalFilterTarget, d.internalFilterWhy = "DROP", whyNoLocalEndpoints
		}
		if !d.hasExternalEndpoints {
			d.externalFilterTarget, d.externalFilterWhy = "DROP", whyNoLocalEndpoints
		}
	}
	return d
}

// planService computes the desired state of one service port: its rules in
// the shared chains go to out.shared, the chains it owns to out.chains and
// their rules, one "-A" line each, to rules. It is pure: the same inputs
// always give the same output, and it reads nothing else.
func planService(env *planEnv, svc *servicePortInfo, endpoints []proxy.Endpoint, out *servicePlan, rules *lineWriter) {
	out.reset()
	out.sticky = svc.SessionAffinityType() == v1.ServiceAffinityClientIP
	d := decide(env, svc, endpoints)

	// Dispatch rules, in the shared chains.
	planClusterIP(env, svc, &d, out)
	planExternalIPs(env, svc, &d, out)
	planLoadBalancer(env, svc, &d, out)
	planNodePort(env, svc, &d, out)
	planHealthCheckNodePort(env, svc, out)

	// The service's own chains.
	planInternalMasquerade(env, svc, &d, rules)
	if d.usesExternalChain {
		out.chains = append(out.chains, svc.chains.external)
		out.decl = append(out.decl, svc.chains.external)
		planExternalChain(env, svc, &d, rules)
	}
	if d.usesFirewallChain {
		out.chains = append(out.chains, svc.chains.firewall)
		out.decl = append(out.decl, svc.chains.firewall)
		planFirewallChain(env, svc, &d, rules)
	}
	if d.usesClusterChain {
		out.chains = append(out.chains, svc.chains.cluster)
		out.decl = append(out.decl, svc.chains.cluster)
		planServiceToEndpoints(env, svc, svc.chains.cluster, d.clusterEndpoints, rules)
	}
	if d.usesLocalChain {
		out.chains = append(out.chains, svc.chains.local)
		out.decl = append(out.decl, svc.chains.local)
		planServiceToEndpoints(env, svc, svc.chains.local, d.localEndpoints, rules)
	}
	for _, ep := range d.reachable {
		chain, _, _ := epStrings(svc.name, ep)
		out.chains = append(out.chains, chain)
		if slices.Contains(env.keepEndpointChains, chain) {
			continue
		}
		planEndpointChain(env, svc, ep, rules)
		out.decl = append(out.decl, chain)
	}
}

// dispatch renders one shared-chain rule "<comment> -m p -p p -d ip --dport n -j target".
func (env *planEnv) dispatch(svc *servicePortInfo, why string, dst netip.Addr, port int, target string) string {
	w := env.spec.start()
	w.comment(svc.nameStr, why).proto(svc.protocol)
	if dst.IsValid() {
		w.w("-d", dst.String())
	}
	w.w("--dport").int(port).jump(target)
	return env.spec.done()
}

func portString(p int) string { return strconv.Itoa(p) }

// isIPv6 reports the family of the service (by its cluster IP).
func isIPv6(svc proxy.ServicePort) bool {
	ip := svc.ClusterIP()
	return ip.IsValid() && ip.Is6() && !ip.Is4In6()
}
