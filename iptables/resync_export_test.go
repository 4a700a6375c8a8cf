package iptables

// ForgetDispatchRulesForTest is a fault in the engine's record of what it
// wrote: the nat KUBE-SERVICES rules of the named service's ports are
// dropped from it, so the next partial sync of that service adds them
// again (twice in the kernel) instead of leaving them.
func ForgetDispatchRulesForTest(p *Proxier, namespace, name string) {
	for spn, plan := range p.r.applied {
		if spn.Namespace == namespace && spn.Name == name {
			plan.shared[natServices] = nil
		}
	}
}
