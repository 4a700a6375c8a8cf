package winkernel

// planExternalIPs plans one LB per external IP, with the external
// backends and DSR for externalTrafficPolicy: Local.
func planExternalIPs(sel *selection, plan *servicePlan) {
	b, p := sel.external()
	for _, ip := range sel.svc.ExternalIPs() {
		plan.add(sel, kindExternalIP, sel.proto, ip, sel.svc.Port(), b, p, FlagVipExternalIP|sel.externalDSR)
	}
}
