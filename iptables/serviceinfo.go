package iptables

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// servicePortInfo is the engine's ServicePort: the tracker's base port plus
// the chain names and strings every sync needs, computed once when the
// service changes rather than on every sync.
type servicePortInfo struct {
	*proxy.BaseServicePort
	name     proxy.ServicePortName
	nameStr  string // "ns/name:port"
	protocol string // "tcp", "udp", "sctp"
	chains   serviceChainNames
}

func newServicePortInfo(name proxy.ServicePortName, base *proxy.BaseServicePort) *servicePortInfo {
	return &servicePortInfo{
		BaseServicePort: base,
		name:            name,
		nameStr:         name.String(),
		protocol:        proxy.LowerProtocol(name.Protocol),
		chains:          makeServiceChainNames(name),
	}
}

// makeServicePort is the tracker's MakeServicePort hook.
func makeServicePort(port *v1.ServicePort, svc *v1.Service, base *proxy.BaseServicePort) proxy.ServicePort {
	name := proxy.ServicePortName{
		NamespacedName: types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		Port:           port.Name,
		Protocol:       port.Protocol,
	}
	return newServicePortInfo(name, base)
}

// endpointInfo is the engine's Endpoint: the base endpoint plus its chain name.
type endpointInfo struct {
	*proxy.BaseEndpoint
	str   string // "ip:port"
	ipStr string // the ip of str (not a string of its own)
	chain xtables.Chain
}

func newEndpointInfo(base *proxy.BaseEndpoint, name *proxy.ServicePortName) *endpointInfo {
	str := base.String()
	return &endpointInfo{
		BaseEndpoint: base,
		str:          str,
		ipStr:        hostOf(str, base.Addr),
		chain:        endpointChainName(*name, str),
	}
}

// hostOf returns the address part of str, addr's "ip:port" or "[ip]:port"
// (netip.AddrPort's String), which is addr.String().
func hostOf(str string, addr netip.Addr) string {
	i := strings.LastIndexByte(str, ':')
	switch {
	case !addr.IsValid() || i < 0:
		return addr.String()
	case addr.Is4():
		return str[:i]
	case i >= 2 && str[0] == '[' && str[i-1] == ']':
		return str[1 : i-1]
	}
	return addr.String()
}

// makeEndpoint is the tracker's MakeEndpoint hook.
func makeEndpoint(base *proxy.BaseEndpoint, name *proxy.ServicePortName) proxy.Endpoint {
	return newEndpointInfo(base, name)
}

// asServicePortInfo returns svc as the engine's type, wrapping ports that
// came from elsewhere (tests, other trackers) on the fly.
func asServicePortInfo(name proxy.ServicePortName, svc proxy.ServicePort) *servicePortInfo {
	switch s := svc.(type) {
	case *servicePortInfo:
		return s
	case *proxy.BaseServicePort:
		return newServicePortInfo(name, s)
	}
	return newServicePortInfo(name, baseFromServicePort(svc))
}

func baseFromServicePort(s proxy.ServicePort) *proxy.BaseServicePort {
	return &proxy.BaseServicePort{
		ClusterIPAddr:            s.ClusterIP(),
		PortNum:                  s.Port(),
		ProtocolValue:            s.Protocol(),
		NodePortNum:              s.NodePort(),
		ExternalIPAddrs:          s.ExternalIPs(),
		LoadBalancerVIPAddrs:     s.LoadBalancerVIPs(),
		LoadBalancerRanges:       s.LoadBalancerSourceRanges(),
		SessionAffinity:          s.SessionAffinityType(),
		StickyMaxAge:             s.StickyMaxAgeSeconds(),
		HealthCheckNodePortNum:   s.HealthCheckNodePort(),
		ExternalLocal:            s.ExternalPolicyLocal(),
		InternalLocal:            s.InternalPolicyLocal(),
		TrafficDistributionValue: s.TrafficDistribution(),
		HintsAnnotationValue:     s.HintsAnnotation(),
		AnnotationsValue:         s.Annotations(),
	}
}

// epChain returns the endpoint's chain name and strings.
func epStrings(name proxy.ServicePortName, ep proxy.Endpoint) (chain xtables.Chain, str, ip string) {
	if e, ok := ep.(*endpointInfo); ok {
		return e.chain, e.str, e.ipStr
	}
	str = ep.String()
	return endpointChainName(name, str), str, ep.IP().String()
}
