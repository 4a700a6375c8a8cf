package changetracker

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

func spn(ns, name, port string, proto v1.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{NamespacedName: nn(ns, name), Port: port, Protocol: proto}
}

// makeService builds a ClusterIP service with the given cluster IPs and
// ports "p<port>" of protocol proto, then applies the tweaks.
func makeService(ns, name string, clusterIPs []string, ports []int32, proto v1.Protocol, tweaks ...func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIPs[0],
			ClusterIPs: clusterIPs,
		},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: portName(p), Port: p, Protocol: proto})
	}
	for _, f := range tweaks {
		f(svc)
	}
	return svc
}

func portName(p int32) string { return "p" + itoa(int(p)) }

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b []byte
	for i > 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

type epSpec struct {
	ip          string
	notReady    bool
	serving     *bool
	terminating bool
	node        string
	zone        string
	zoneHints   []string
	nodeHints   []string
}

// makeSlice builds an IPv4 (or IPv6, by the first address) slice of service
// ns/svc with one port per entry of ports ("p<port>", protocol proto).
func makeSlice(ns, svc, name string, ports []int32, proto v1.Protocol, eps ...epSpec) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 {
		if a, err := netip.ParseAddr(eps[0].ip); err == nil && a.Is6() {
			at = discovery.AddressTypeIPv6
		}
	}
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: at,
	}
	for _, p := range ports {
		s.Ports = append(s.Ports, discovery.EndpointPort{Name: ptr.To(portName(p)), Port: ptr.To(p), Protocol: ptr.To(proto)})
	}
	for _, e := range eps {
		ep := discovery.Endpoint{
			Addresses: []string{e.ip},
			Conditions: discovery.EndpointConditions{
				Ready:       ptr.To(!e.notReady),
				Serving:     e.serving,
				Terminating: ptr.To(e.terminating),
			},
		}
		if e.node != "" {
			ep.NodeName = ptr.To(e.node)
		}
		if e.zone != "" {
			ep.Zone = ptr.To(e.zone)
		}
		if len(e.zoneHints) > 0 || len(e.nodeHints) > 0 {
			ep.Hints = &discovery.EndpointHints{}
			for _, z := range e.zoneHints {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: z})
			}
			for _, n := range e.nodeHints {
				ep.Hints.ForNodes = append(ep.Hints.ForNodes, discovery.ForNode{Name: n})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// endpointStrings renders the endpoints of one port as "ip:port" strings.
func endpointStrings(eps []proxy.Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.String())
	}
	return out
}
