package iptables

// planClusterIP captures traffic to the cluster IP: a nat KUBE-SERVICES
// jump to the internal traffic chain, or, with nowhere to send it, a filter
// KUBE-SERVICES REJECT (no endpoints) or DROP (internalTrafficPolicy Local
// and no local endpoint).
func planClusterIP(env *planEnv, svc *servicePortInfo, d *decision, out *servicePlan) {
	ip := svc.ClusterIP()
	if !ip.IsValid() {
		return
	}
	if d.hasInternalEndpoints {
		out.shared[natServices] = append(out.shared[natServices],
			env.dispatch(svc, " cluster IP", ip, svc.Port(), string(d.internalChain)))
		return
	}
	out.shared[filterServices] = append(out.shared[filterServices],
		env.dispatch(svc, d.internalFilterWhy, ip, svc.Port(), d.internalFilterTarget))
}
