//go:build linux

package nftables

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// planAffinitySets: ClientIP affinity keeps one dynamic set per reachable
// endpoint, filled by the endpoint chain with the client's address and
// checked first by the policy chains; entries time out after the
// service's affinity timeout.
func (p *planner) planAffinitySets(sp *servicePlan, pp *portPlan) {
	if pp.svc.SessionAffinityType() != v1.ServiceAffinityClientIP {
		return
	}
	timeout := time.Duration(pp.svc.StickyMaxAgeSeconds()) * time.Second
	for _, ep := range pp.reachable {
		sp.extra().sets = append(sp.extra().sets, setSpec{name: endpointNames(pp.spn, ep).affinity, typ: p.addrType, timeout: timeout})
	}
}
