package iptables

// planNodePort captures traffic to the node port (on the addresses the nat
// KUBE-SERVICES tail rule sends to KUBE-NODEPORTS) into the EXT chain, and
// rejects or drops it in filter KUBE-EXTERNAL-SERVICES when there is no
// endpoint for external traffic. Node ports are not subject to
// loadBalancerSourceRanges (as in kube-proxy).
func planNodePort(env *planEnv, svc *servicePortInfo, d *decision, out *servicePlan) {
	np := svc.NodePort()
	if np == 0 {
		return
	}
	if d.hasEndpoints {
		w := env.spec.start()
		w.comment(svc.nameStr).proto(svc.protocol).w("--dport").int(np).jump(string(svc.chains.external))
		out.shared[natNodePorts] = append(out.shared[natNodePorts], env.spec.done())
	}
	if !d.hasExternalEndpoints {
		w := env.spec.start()
		w.comment(svc.nameStr, d.externalFilterWhy).w("-m", "addrtype", "--dst-type", "LOCAL").
			proto(svc.protocol).w("--dport").int(np).jump(d.externalFilterTarget)
		out.shared[filterExternalServices] = append(out.shared[filterExternalServices], env.spec.done())
	}
}

// planHealthCheckNodePort accepts the health-check node port of an eTP
// Local service in filter KUBE-NODEPORTS, whether or not this node has a
// local endpoint (the health check answers either way).
func planHealthCheckNodePort(env *planEnv, svc *servicePortInfo, out *servicePlan) {
	hc := svc.HealthCheckNodePort()
	if hc == 0 {
		return
	}
	w := env.spec.start()
	w.comment(svc.nameStr, " health check node port").proto("tcp").w("--dport").int(hc).jump("ACCEPT")
	out.shared[filterNodePorts] = append(out.shared[filterNodePorts], env.spec.done())
}
