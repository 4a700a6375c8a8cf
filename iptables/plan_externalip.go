package iptables

import "github.com/svcproxy/svcproxy/iptables/xtables"

// planExternalIPs captures traffic to spec.externalIPs into the EXT chain,
// and rejects or drops what has no external endpoint in filter
// KUBE-EXTERNAL-SERVICES.
func planExternalIPs(env *planEnv, svc *servicePortInfo, d *decision, out *servicePlan) {
	for _, ip := range svc.ExternalIPs() {
		if d.hasEndpoints {
			out.shared[natServices] = append(out.shared[natServices],
				env.dispatch(svc, " external IP", ip, svc.Port(), string(svc.chains.external)))
		}
		if !d.hasExternalEndpoints {
			out.shared[filterExternalServices] = append(out.shared[filterExternalServices],
				env.dispatch(svc, d.externalFilterWhy, ip, svc.Port(), d.externalFilterTarget))
		}
	}
}

// planExternalChain writes the KUBE-EXT chain: every external destination
// (node port, external IP, load-balancer IP) enters it.
//
// With externalTrafficPolicy Cluster it masquerades (the endpoint may be on
// another node) and jumps to KUBE-SVC. With Local the client's address is
// kept, except: traffic from this node's pods goes to KUBE-SVC (as if it
// had gone out to the load balancer and back), and traffic from the node
// itself is masqueraded and goes to KUBE-SVC. Anything else goes to
// KUBE-SVL, if there is a local endpoint; otherwise it falls through and
// filter KUBE-EXTERNAL-SERVICES drops it.
func planExternalChain(env *planEnv, svc *servicePortInfo, d *decision, rules *lineWriter) {
	ext := svc.chains.external
	if !svc.ExternalPolicyLocal() {
		rules.rule(ext).comment("masquerade traffic for ", svc.nameStr, " external destinations").
			jump(string(xtables.ChainKubeMarkMasq))
	} else if d.usesClusterChain {
		if env.ifLocal != nil {
			rules.rule(ext).comment("pod traffic for ", svc.nameStr, " external destinations").
				w(env.ifLocal...).jump(string(svc.chains.cluster))
		}
		rules.rule(ext).comment("masquerade LOCAL traffic for ", svc.nameStr, " external destinations").
			w("-m", "addrtype", "--src-type", "LOCAL").jump(string(xtables.ChainKubeMarkMasq))
		rules.rule(ext).comment("route LOCAL traffic for ", svc.nameStr, " external destinations").
			w("-m", "addrtype", "--src-type", "LOCAL").jump(string(svc.chains.cluster))
	}
	if d.hasExternalEndpoints {
		rules.rule(ext).jump(string(d.externalPolicyChain))
	}
}
