package winkernel

// planLoadBalancerIngress plans one LB per load-balancer ingress IP, with
// the node-port backends, DSR for externalTrafficPolicy: Local, and DSR
// with PreserveDIP and UseMux for the preserve-destination annotation;
// each followed by its health-check LB (plan_healthcheck.go).
func planLoadBalancerIngress(env *planEnv, sel *selection, plan *servicePlan) {
	b, p := sel.nodePortBackends()
	flags := FlagVipExternalIP | sel.externalDSR
	if sel.preserveDIP {
		flags |= FlagDSR | FlagUseMux | FlagPreserveDIP
	}
	for _, ip := range sel.svc.LoadBalancerVIPs() {
		plan.add(sel, kindLoadBalancer, sel.proto, ip, sel.svc.Port(), b, p, flags)
		planHealthCheck(env, sel, ip, plan)
	}
}
