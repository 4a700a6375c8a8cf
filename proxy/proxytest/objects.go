package proxytest

import (
	"fmt"
	"net/netip"
	"strconv"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

// Namespace is the namespace of every object the scenarios build.
const Namespace = "conformance"

// Objects is the complete desired state at one step: every Service and
// EndpointSlice that exists, and this node (nil: no Node object).
type Objects struct {
	Services       []*v1.Service
	EndpointSlices []*discovery.EndpointSlice
	Node           *v1.Node
}

// ServicePortSpec is one port of a test Service.
type ServicePortSpec struct {
	Name       string
	Protocol   v1.Protocol // "" means TCP
	Port       int
	TargetPort int // 0 means Port
	NodePort   int
}

// MakeService builds a Service of type ClusterIP in Namespace with one
// cluster IP (or "None" when clusterIP is invalid: headless) of topo's
// family and the given ports; edit adjusts it further (may be nil).
func MakeService(topo Topology, name string, clusterIP netip.Addr, ports []ServicePortSpec, edit func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec: v1.ServiceSpec{
			Type:            v1.ServiceTypeClusterIP,
			SessionAffinity: v1.ServiceAffinityNone,
			IPFamilies:      []v1.IPFamily{topo.Family},
			Selector:        map[string]string{"app": name},
		},
	}
	if clusterIP.IsValid() {
		svc.Spec.ClusterIP = clusterIP.String()
	} else {
		svc.Spec.ClusterIP = v1.ClusterIPNone
	}
	svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		target := p.TargetPort
		if target == 0 {
			target = p.Port
		}
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{
			Name:       p.Name,
			Protocol:   proto,
			Port:       int32(p.Port),
			TargetPort: intstr.FromInt32(int32(target)),
			NodePort:   int32(p.NodePort),
		})
	}
	if edit != nil {
		edit(svc)
	}
	return svc
}

// EndpointState is the condition set of one endpoint.
type EndpointState int

const (
	// Ready: ready, serving, not terminating.
	Ready EndpointState = iota
	// NotReady: not ready, not serving, not terminating (e.g. failing readiness).
	NotReady
	// TerminatingServing: terminating but still serving (not ready).
	TerminatingServing
	// TerminatingNotServing: terminating and no longer serving.
	TerminatingNotServing
)

// EndpointSpec is one endpoint of a test EndpointSlice.
type EndpointSpec struct {
	Pod   Pod
	State EndpointState
	// ZoneHints, when not nil, become hints.forZones (empty slice: a
	// hints struct with no zones).
	ZoneHints []string
}

// SlicePortSpec is one port of a test EndpointSlice.
type SlicePortSpec struct {
	Name     string
	Protocol v1.Protocol // "" means TCP
	Port     int
}

// MakeSlice builds the EndpointSlice "<service>-<suffix>" of topo's address
// type for service.
func MakeSlice(topo Topology, service, suffix string, ports []SlicePortSpec, eps ...EndpointSpec) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if topo.Family == v1.IPv6Protocol {
		at = discovery.AddressTypeIPv6
	}
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace,
			Name:      service + "-" + suffix,
			Labels: map[string]string{
				discovery.LabelServiceName: service,
				discovery.LabelManagedBy:   "proxytest",
			},
		},
		AddressType: at,
	}
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		s.Ports = append(s.Ports, discovery.EndpointPort{
			Name:     ptr.To(p.Name),
			Protocol: ptr.To(proto),
			Port:     ptr.To(int32(p.Port)),
		})
	}
	for _, e := range eps {
		ep := discovery.Endpoint{
			Addresses: []string{e.Pod.IP.String()},
			NodeName:  ptr.To(e.Pod.Node),
			Zone:      ptr.To(e.Pod.Zone),
			TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: Namespace, Name: e.Pod.Name},
		}
		switch e.State {
		case Ready:
			ep.Conditions = discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
		case NotReady:
			ep.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
		case TerminatingServing:
			ep.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		case TerminatingNotServing:
			ep.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
		default:
			panic("proxytest: unknown endpoint state " + strconv.Itoa(int(e.State)))
		}
		if e.ZoneHints != nil {
			ep.Hints = &discovery.EndpointHints{}
			for _, z := range e.ZoneHints {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: z})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// MakeNode builds this node (topo.NodeName) in zone (no zone label when "").
func MakeNode(topo Topology, zone string) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   topo.NodeName,
			Labels: map[string]string{v1.LabelHostname: topo.NodeName},
		},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: topo.NodeIP.String()},
			{Type: v1.NodeHostName, Address: topo.NodeName},
		}},
	}
	if zone != "" {
		n.Labels[proxy.LabelTopologyZone] = zone
	}
	return n
}

// objectKey names a namespaced object.
func objectKey(ns, name string) string { return fmt.Sprintf("%s/%s", ns, name) }
