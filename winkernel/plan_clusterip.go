package winkernel

// planClusterIP plans the cluster-IP LB: every endpoint, or only local
// ones with internalTrafficPolicy: Local; DSR with Config.EnableDSR when
// HNS has it. On overlay networks kube-proxy also keeps a remote endpoint
// for the cluster IP itself, with the host's MAC and the node IP as
// provider address.
func planClusterIP(env *planEnv, sel *selection, plan *servicePlan) {
	svc := sel.svc
	if !svc.ClusterIP().IsValid() {
		return
	}
	b, p := sel.cluster, sel.portC
	if svc.InternalPolicyLocal() {
		b, p = sel.local, sel.portL
	}
	var flags LBFlags
	if env.dsr && env.enableDSR {
		flags |= FlagDSR
	}
	plan.add(sel, kindClusterIP, sel.proto, svc.ClusterIP(), svc.Port(), b, p, flags)
	if env.overlay && len(b) > 0 {
		plan.Remotes = append(plan.Remotes, wantRemote{IP: svc.ClusterIP(), MAC: env.hostMAC, ProviderAddress: env.nodeIP})
	}
}
