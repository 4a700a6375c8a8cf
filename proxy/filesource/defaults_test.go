package filesource

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Objects with what the API server would default left out get the API
// server's defaults, so they behave as the same objects created through it.
func TestAPIDefaults(t *testing.T) {
	objs, errs := ParseObjects([]byte(`apiVersion: v1
kind: Service
metadata: {name: plain}
spec:
  clusterIP: 10.96.0.10
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: sticky}
spec:
  type: NodePort
  clusterIPs: [fd00::10, 10.96.0.11]
  sessionAffinity: ClientIP
  ports: [{port: 53, protocol: UDP, targetPort: 5353}]
---
apiVersion: v1
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.12
  ports: [{port: 443}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: plain-1, labels: {kubernetes.io/service-name: plain}}
addressType: IPv4
endpoints: [{addresses: [10.244.0.5]}]
ports: [{port: 8080}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: legacy}
subsets: [{addresses: [{ip: 10.244.0.6}], ports: [{port: 80}]}]
`))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	byName := map[string]any{}
	for _, o := range objs {
		byName[o.Key.Name] = o.Object
	}

	plain := byName["plain"].(*v1.Service).Spec
	if plain.Type != v1.ServiceTypeClusterIP || plain.SessionAffinity != v1.ServiceAffinityNone || plain.SessionAffinityConfig != nil {
		t.Errorf("plain: type %q, affinity %q %v", plain.Type, plain.SessionAffinity, plain.SessionAffinityConfig)
	}
	if p := plain.Ports[0]; p.Protocol != v1.ProtocolTCP || p.TargetPort != intstr.FromInt32(80) {
		t.Errorf("plain port: protocol %q, targetPort %v; want TCP, 80", p.Protocol, p.TargetPort)
	}
	if plain.InternalTrafficPolicy == nil || *plain.InternalTrafficPolicy != v1.ServiceInternalTrafficPolicyCluster || plain.ExternalTrafficPolicy != "" {
		t.Errorf("plain: traffic policies %v / %q", plain.InternalTrafficPolicy, plain.ExternalTrafficPolicy)
	}
	if len(plain.ClusterIPs) != 1 || plain.ClusterIPs[0] != "10.96.0.10" || len(plain.IPFamilies) != 1 || plain.IPFamilies[0] != v1.IPv4Protocol ||
		plain.IPFamilyPolicy == nil || *plain.IPFamilyPolicy != v1.IPFamilyPolicySingleStack {
		t.Errorf("plain: clusterIPs %v, ipFamilies %v, policy %v", plain.ClusterIPs, plain.IPFamilies, plain.IPFamilyPolicy)
	}

	sticky := byName["sticky"].(*v1.Service).Spec
	if c := sticky.SessionAffinityConfig; c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil || *c.ClientIP.TimeoutSeconds != 10800 {
		t.Errorf("sticky: sessionAffinityConfig %+v, want the 10800s timeout", c)
	}
	if sticky.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyCluster {
		t.Errorf("sticky: externalTrafficPolicy %q, want Cluster", sticky.ExternalTrafficPolicy)
	}
	if sticky.ClusterIP != "fd00::10" || len(sticky.IPFamilies) != 2 || sticky.IPFamilies[0] != v1.IPv6Protocol ||
		*sticky.IPFamilyPolicy != v1.IPFamilyPolicyRequireDualStack {
		t.Errorf("sticky: clusterIP %q, ipFamilies %v, policy %v", sticky.ClusterIP, sticky.IPFamilies, *sticky.IPFamilyPolicy)
	}
	if p := sticky.Ports[0]; p.Protocol != v1.ProtocolUDP || p.TargetPort != intstr.FromInt32(5353) {
		t.Errorf("sticky port: explicit values changed: %+v", p)
	}

	lb := byName["lb"].(*v1.Service).Spec
	if lb.AllocateLoadBalancerNodePorts == nil || !*lb.AllocateLoadBalancerNodePorts || lb.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyCluster {
		t.Errorf("lb: allocateLoadBalancerNodePorts %v, externalTrafficPolicy %q", lb.AllocateLoadBalancerNodePorts, lb.ExternalTrafficPolicy)
	}

	slice := byName["plain-1"].(*discovery.EndpointSlice)
	if p := slice.Ports[0]; p.Protocol == nil || *p.Protocol != v1.ProtocolTCP || p.Name == nil || *p.Name != "" {
		t.Errorf("slice port: protocol %v, name %v; want TCP and \"\"", p.Protocol, p.Name)
	}
	ep := byName["legacy"].(*v1.Endpoints)
	if p := ep.Subsets[0].Ports[0]; p.Protocol != v1.ProtocolTCP {
		t.Errorf("endpoints port: protocol %q, want TCP", p.Protocol)
	}
}
