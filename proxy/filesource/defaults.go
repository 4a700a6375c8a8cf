package filesource

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultSessionAffinityTimeout is the API server's default
// sessionAffinityConfig.clientIP.timeoutSeconds (3 hours).
const DefaultSessionAffinityTimeout int32 = 10800

// applyAPIDefaults fills what the API server fills when the same object is
// created through it, so a file behaves as the API would: the defaulting
// of core/v1 and discovery/v1, and the Service strategy's IP-family
// fields derived from the cluster IPs. Only unset fields change.
func applyAPIDefaults(obj any) {
	switch o := obj.(type) {
	case *v1.Service:
		defaultService(o)
	case *discovery.EndpointSlice:
		for i := range o.Ports {
			if o.Ports[i].Protocol == nil {
				tcp := v1.ProtocolTCP
				o.Ports[i].Protocol = &tcp
			}
			if o.Ports[i].Name == nil {
				empty := ""
				o.Ports[i].Name = &empty
			}
		}
	case *v1.Endpoints:
		for i := range o.Subsets {
			for j := range o.Subsets[i].Ports {
				if o.Subsets[i].Ports[j].Protocol == "" {
					o.Subsets[i].Ports[j].Protocol = v1.ProtocolTCP
				}
			}
		}
	}
}

func defaultService(s *v1.Service) {
	spec := &s.Spec
	if spec.Type == "" {
		spec.Type = v1.ServiceTypeClusterIP
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = v1.ServiceAffinityNone
	}
	if spec.SessionAffinity == v1.ServiceAffinityNone {
		spec.SessionAffinityConfig = nil
	}
	if spec.SessionAffinity == v1.ServiceAffinityClientIP {
		if spec.SessionAffinityConfig == nil {
			spec.SessionAffinityConfig = &v1.SessionAffinityConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP == nil {
			spec.SessionAffinityConfig.ClientIP = &v1.ClientIPConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			timeout := DefaultSessionAffinityTimeout
			spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &timeout
		}
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if (spec.Type == v1.ServiceTypeNodePort || spec.Type == v1.ServiceTypeLoadBalancer) && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	if spec.Type != v1.ServiceTypeExternalName && spec.InternalTrafficPolicy == nil {
		cluster := v1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &cluster
	}
	if spec.Type == v1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		yes := true
		spec.AllocateLoadBalancerNodePorts = &yes
	}

	// The API server keeps clusterIP and clusterIPs[0] equal, and derives
	// ipFamilies and ipFamilyPolicy from the cluster IPs when unset.
	if spec.Type == v1.ServiceTypeExternalName {
		return
	}
	if len(spec.ClusterIPs) == 0 && spec.ClusterIP != "" {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if len(spec.IPFamilies) == 0 && spec.ClusterIP != v1.ClusterIPNone {
		for _, ip := range spec.ClusterIPs {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				spec.IPFamilies = nil // left to validation and the tracker
				break
			}
			family := v1.IPv4Protocol
			if a.Is6() && !a.Is4In6() {
				family = v1.IPv6Protocol
			}
			spec.IPFamilies = append(spec.IPFamilies, family)
		}
	}
	if spec.IPFamilyPolicy == nil && len(spec.IPFamilies) > 0 {
		policy := v1.IPFamilyPolicySingleStack
		if len(spec.IPFamilies) > 1 {
			policy = v1.IPFamilyPolicyRequireDualStack
		}
		spec.IPFamilyPolicy = &policy
	}
}
