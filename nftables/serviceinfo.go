//go:build linux

package nftables

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
)

// servicePort wraps the tracker's service port with its cluster chain's
// name, computed once when the Service is recorded (portNames).
type servicePort struct {
	*proxy.BaseServicePort
	cluster string
}

func makeServicePort(port *v1.ServicePort, service *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort {
	spn := proxy.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: service.Namespace, Name: service.Name},
		Port:           port.Name,
		Protocol:       base.ProtocolValue,
	}
	return &servicePort{BaseServicePort: base, cluster: namesFor(spn, base).cluster}
}
