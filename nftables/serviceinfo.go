//go:build linux

package nftables

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/proxy"
)

// servicePort wraps the tracker's service port with its chain names,
// computed once when the Service is recorded.
type servicePort struct {
	*proxy.BaseServicePort
	names portNames
}

func makeServicePort(port *v1.ServicePort, service *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort {
	spn := proxy.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: service.Namespace, Name: service.Name},
		Port:           port.Name,
		Protocol:       base.ProtocolValue,
	}
	return &servicePort{BaseServicePort: base, names: namesFor(spn, base)}
}
