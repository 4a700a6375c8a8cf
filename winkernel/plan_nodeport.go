package winkernel

import "net/netip"

// planNodePort plans the node-port LB: no frontend VIP (it answers on
// every host address), routed locally, with the external backends (local
// only with the preserve-destination annotation), DSR for
// externalTrafficPolicy: Local.
func planNodePort(sel *selection, plan *servicePlan) {
	if sel.svc.NodePort() <= 0 {
		return
	}
	b, p := sel.nodePortBackends()
	plan.add(sel, kindNodePort, sel.proto, netip.Addr{}, sel.svc.NodePort(), b, p, FlagVipExternalIP|FlagLocalRoutedVIP|sel.externalDSR)
}
