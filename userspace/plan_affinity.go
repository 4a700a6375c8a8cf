package userspace

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy"
)

// affinityOf is the session affinity of a service port: ClientIP with its
// timeout, applied by the LoadBalancer to both endpoint sets.
func affinityOf(svc proxy.ServicePort) Affinity {
	if svc.SessionAffinityType() != v1.ServiceAffinityClientIP {
		return Affinity{}
	}
	return Affinity{ClientIP: true, Timeout: time.Duration(svc.StickyMaxAgeSeconds()) * time.Second}
}
