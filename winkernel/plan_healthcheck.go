package winkernel

import "net/netip"

// planHealthCheck plans, with Config.ForwardHealthCheckVIP and a root
// endpoint, the LB that forwards the service's health-check node port (or
// the proxy's healthz port) on an ingress IP to the root endpoint, while
// the service has endpoints. The check is HTTP: TCP, whatever the
// service's protocol (kube-proxy uses the service's protocol).
func planHealthCheck(env *planEnv, sel *selection, ip netip.Addr, plan *servicePlan) {
	if !env.rootIP.IsValid() || !sel.hasAny {
		return
	}
	hc := sel.svc.HealthCheckNodePort()
	if hc == 0 {
		hc = env.healthzPort
	}
	var flags LBFlags
	if sel.preserveDIP {
		flags = FlagUseMux | FlagPreserveDIP
	}
	root := []backend{{IP: env.rootIP, Port: uint16(hc), Local: true}}
	plan.add(sel, kindHealthCheck, ProtocolTCP, ip, hc, root, uint16(hc), flags)
}
