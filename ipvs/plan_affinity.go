package ipvs

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// virtualServerTemplate decides what every virtual server of a service port
// shares: protocol, scheduler (Config.Scheduler, or the service's
// AnnotationScheduler) and ClientIP session affinity, which IPVS does with
// persistence: the same client goes to the same real server until
// StickyMaxAgeSeconds of idleness.
func (in *planInput) virtualServerTemplate(spn proxy.ServicePortName, svc proxy.ServicePort) VirtualServer {
	vs := VirtualServer{Protocol: svc.Protocol(), Scheduler: in.scheduler}
	if s, ok := svc.Annotations()[AnnotationScheduler]; ok {
		if validScheduler(s) {
			vs.Scheduler = s
		} else if in.badScheduler != nil {
			in.badScheduler(spn, s)
		}
	}
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		vs.Flags |= FlagPersistent
		t := svc.StickyMaxAgeSeconds()
		if t <= 0 {
			t = int(v1.DefaultClientIPServiceAffinitySeconds)
		}
		vs.Timeout = uint32(t)
	}
	return vs
}
