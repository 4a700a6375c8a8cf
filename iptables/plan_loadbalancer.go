package iptables

// planLoadBalancer captures traffic to the load-balancer ingress IPs: into
// the firewall chain when loadBalancerSourceRanges are set (what it does
// not accept is dropped by filter KUBE-PROXY-FIREWALL), else straight into
// the EXT chain; with no external endpoint, filter KUBE-EXTERNAL-SERVICES
// rejects or drops it.
func planLoadBalancer(env *planEnv, svc *servicePortInfo, d *decision, out *servicePlan) {
	for _, ip := range svc.LoadBalancerVIPs() {
		if d.hasEndpoints {
			out.shared[natServices] = append(out.shared[natServices],
				env.dispatch(svc, " loadbalancer IP", ip, svc.Port(), string(d.loadBalancerChain)))
		}
		if d.usesFirewallChain {
			out.shared[filterFirewall] = append(out.shared[filterFirewall],
				env.dispatch(svc, " traffic not accepted by "+string(svc.chains.firewall), ip, svc.Port(), "DROP"))
		}
	}
	if !d.hasExternalEndpoints {
		for _, ip := range svc.LoadBalancerVIPs() {
			out.shared[filterExternalServices] = append(out.shared[filterExternalServices],
				env.dispatch(svc, d.externalFilterWhy, ip, svc.Port(), d.externalFilterTarget))
		}
	}
}

// planFirewallChain writes KUBE-FW: sources inside loadBalancerSourceRanges
// continue to the EXT chain. When a range holds the node's IP, packets with
// a load-balancer IP as source are let through too (a VIP that is a local
// address loops back with itself as source). Everything else falls off the
// end un-DNATed and is dropped in filter KUBE-PROXY-FIREWALL.
func planFirewallChain(env *planEnv, svc *servicePortInfo, d *decision, rules *lineWriter) {
	fw := svc.chains.firewall
	allowFromNode := false
	for _, cidr := range svc.LoadBalancerSourceRanges() {
		rules.rule(fw).comment(svc.nameStr, " loadbalancer IP").w("-s", cidr.String()).jump(string(svc.chains.external))
		if env.nodeIP.IsValid() && cidr.Contains(env.nodeIP) {
			allowFromNode = true
		}
	}
	if allowFromNode {
		for _, ip := range svc.LoadBalancerVIPs() {
			rules.rule(fw).comment(svc.nameStr, " loadbalancer IP").w("-s", ip.String()).jump(string(svc.chains.external))
		}
	}
	rules.rule(fw).comment("other traffic to ", svc.nameStr, " will be dropped by KUBE-PROXY-FIREWALL").end()
}
