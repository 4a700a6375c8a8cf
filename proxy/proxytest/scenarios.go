package proxytest

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/proxy"
)

// Ports the scenarios use. Every service port and target port is in
// Topology.ServerPorts; node ports are not (nothing listens on them).
const (
	portHTTP      = 80
	portMetrics   = 81
	portChanged   = 82
	portDNS       = 53
	targetHTTP    = 8080
	targetMetrics = 8081
	targetDNS     = 5353
	nodePortHTTP  = 30080
	nodePortDNS   = 30053
	// OtherProxyName is the service-proxy-name label value of services
	// that belong to another proxy (engines run with no name of their own).
	OtherProxyName = "other-proxy"
)

// Scenarios returns the conformance table for topo: the behaviours of
// kube-proxy's iptables mode that every engine must reproduce, as sequences
// of object states and the packet outcomes each state must produce.
//
// Masquerade expectations follow the iptables mode with a cluster-CIDR
// local-traffic detector: traffic to a cluster IP is masqueraded unless it
// comes from a pod; traffic to node ports, external IPs and load-balancer
// IPs is masqueraded under externalTrafficPolicy Cluster, and under Local
// only when it comes from the node itself; a pod reaching itself through a
// service (hairpin) is always masqueraded.
func Scenarios(topo Topology) []Scenario {
	a1, a2 := topo.LocalPods[0], topo.LocalPods[1]
	b1, b2 := topo.RemotePods[0], topo.RemotePods[1]
	client := topo.ClientPod
	nodeIP := topo.NodeIP
	node := MakeNode(topo, topo.Zone)

	httpPorts := []ServicePortSpec{{Name: "http", Port: portHTTP, TargetPort: targetHTTP}}
	httpSlicePorts := []SlicePortSpec{{Name: "http", Port: targetHTTP}}

	objs := func(svcs []*v1.Service, slices ...*discovery.EndpointSlice) Objects {
		return Objects{Services: svcs, EndpointSlices: slices, Node: node}
	}
	svcs := func(s ...*v1.Service) []*v1.Service { return s }
	with := func(state EndpointState, pods ...Pod) []EndpointSpec {
		out := make([]EndpointSpec, len(pods))
		for i, p := range pods {
			out[i] = EndpointSpec{Pod: p, State: state}
		}
		return out
	}
	ready := func(pods ...Pod) []EndpointSpec { return with(Ready, pods...) }
	join := func(lists ...[]EndpointSpec) []EndpointSpec {
		var out []EndpointSpec
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}
	httpSlice := func(svc string, e []EndpointSpec) *discovery.EndpointSlice {
		return MakeSlice(topo, svc, "1", httpSlicePorts, e...)
	}
	web := func(name string, vip netip.Addr, edit func(*v1.Service)) *v1.Service {
		return MakeService(topo, name, vip, httpPorts, edit)
	}
	nodePort := func(typ v1.ServiceType, np int) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Spec.Type = typ
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			s.Spec.Ports[0].NodePort = int32(np)
		}
	}
	loadBalancer := func(lb netip.Addr) func(*v1.Service) {
		return func(s *v1.Service) {
			nodePort(v1.ServiceTypeLoadBalancer, nodePortHTTP)(s)
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: lb.String()}}
		}
	}
	http := func(pods ...Pod) []netip.AddrPort { return Backends(targetHTTP, pods...) }
	fwd := func(masq bool, bs []netip.AddrPort) Result { return ForwardedTo(masq, bs...) }
	notProxied := Result{Verdict: NotProxied}
	rejected := Result{Verdict: Rejected}
	dropped := Result{Verdict: Dropped}
	pod := func(dst netip.Addr, port int) Packet { return FromPodTo(topo, dst, port) }
	host := func(dst netip.Addr, port int) Packet { return FromNodeTo(topo, dst, port) }
	ext := func(dst netip.Addr, port int) Packet { return FromExternalTo(topo, dst, port) }
	ext2 := func(dst netip.Addr, port int) Packet { return From(ext(dst, port), topo.ExternalClient2) }
	chk := func(name string, p Packet, want Result) Check { return Check{Name: name, Packet: p, Want: want} }

	var table []Scenario

	// --- ClusterIP ---
	{
		vip := topo.ServiceIP(1)
		table = append(table, Scenario{
			Name: "cluster-ip",
			Doc:  "a ClusterIP service reached from a pod (not masqueraded), from the node and from an external host routed through the node (both masqueraded)",
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(web("web", vip, nil)), httpSlice("web", ready(a1, b1))),
				Checks: []Check{
					chk("from-pod", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("from-node", host(vip, portHTTP), fwd(true, http(a1, b1))),
					chk("from-external", ext(vip, portHTTP), fwd(true, http(a1, b1))),
					chk("other-port", pod(vip, portMetrics), notProxied),
					chk("other-protocol", UDP(pod(vip, portHTTP)), notProxied),
				},
			}},
		})
	}

	// --- NodePort ---
	{
		vip := topo.ServiceIP(2)
		table = append(table, Scenario{
			Name: "node-port",
			Doc:  "a NodePort service on the node IP, from every origin; externalTrafficPolicy Cluster masquerades all of it",
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(web("np", vip, nodePort(v1.ServiceTypeNodePort, nodePortHTTP))), httpSlice("np", ready(a1, b1))),
				Checks: []Check{
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
					chk("pod-node-port", pod(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
					chk("node-node-port", host(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
					chk("pod-cluster-ip", pod(vip, portHTTP), fwd(false, http(a1, b1))),
				},
			}},
		})
	}

	// --- LoadBalancer ---
	{
		vip, lb := topo.ServiceIP(3), topo.LoadBalancerIP(1)
		table = append(table, Scenario{
			Name: "load-balancer",
			Doc:  "a LoadBalancer service's ingress IP and node port, externalTrafficPolicy Cluster",
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(web("lb", vip, loadBalancer(lb))), httpSlice("lb", ready(a1, b1))),
				Checks: []Check{
					chk("external-lb", ext(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("pod-lb", pod(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("node-lb", host(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
					chk("external-lb-other-port", ext(lb, portMetrics), notProxied),
				},
			}},
		})
	}

	// --- loadBalancerSourceRanges ---
	{
		vip, lb := topo.ServiceIP(4), topo.LoadBalancerIP(2)
		svc := web("lb-ranges", vip, func(s *v1.Service) {
			loadBalancer(lb)(s)
			s.Spec.LoadBalancerSourceRanges = []string{HostPrefix(topo.ExternalClient).String()}
		})
		table = append(table, Scenario{
			Name: "load-balancer-source-ranges",
			Doc:  "loadBalancerSourceRanges admit only the listed clients to the load-balancer IP (others are dropped); the node port stays open",
			Steps: []Step{{
				Name:    "first-client-allowed",
				Objects: objs(svcs(svc), httpSlice("lb-ranges", ready(a1, b1))),
				Checks: []Check{
					chk("allowed-client", ext(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("blocked-client", ext2(lb, portHTTP), dropped),
					chk("blocked-pod", pod(lb, portHTTP), dropped),
					chk("blocked-client-node-port", ext2(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
				},
			}},
		})
	}

	// --- externalIPs ---
	{
		vip, eip := topo.ServiceIP(5), topo.ExternalIP(1)
		svc := web("eip", vip, func(s *v1.Service) { s.Spec.ExternalIPs = []string{eip.String()} })
		table = append(table, Scenario{
			Name: "external-ips",
			Doc:  "spec.externalIPs are served like load-balancer IPs (masqueraded under externalTrafficPolicy Cluster)",
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(svc), httpSlice("eip", ready(a1, b1))),
				Checks: []Check{
					chk("external", ext(eip, portHTTP), fwd(true, http(a1, b1))),
					chk("pod", pod(eip, portHTTP), fwd(true, http(a1, b1))),
					chk("node", host(eip, portHTTP), fwd(true, http(a1, b1))),
					chk("external-other-port", ext(eip, portMetrics), notProxied),
				},
			}},
		})
	}

	// --- sessionAffinity ClientIP ---
	{
		vip := topo.ServiceIP(6)
		svc := web("sticky", vip, func(s *v1.Service) {
			nodePort(v1.ServiceTypeNodePort, nodePortHTTP)(s)
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](v1.DefaultClientIPServiceAffinitySeconds)}}
		})
		all := http(a1, a2, b1)
		table = append(table, Scenario{
			Name: "session-affinity",
			Doc:  "sessionAffinity ClientIP keeps each client on one backend",
			Steps: []Step{{
				Name:    "three-endpoints",
				Objects: objs(svcs(svc), httpSlice("sticky", ready(a1, a2, b1))),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), StickyTo(false, all...)),
					chk("external", ext(vip, portHTTP), StickyTo(true, all...)),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), StickyTo(true, all...)),
				},
			}},
		})
	}

	// --- externalTrafficPolicy Local ---
	{
		vip, lb := topo.ServiceIP(7), topo.LoadBalancerIP(3)
		svc := web("etp-local", vip, func(s *v1.Service) {
			loadBalancer(lb)(s)
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		})
		table = append(table, Scenario{
			Name: "external-traffic-policy-local",
			Doc: "externalTrafficPolicy Local: external clients reach only local endpoints with their source kept, " +
				"and are dropped when there is none; pods and the node are short-circuited to every endpoint",
			Steps: []Step{{
				Name:    "local-and-remote",
				Objects: objs(svcs(svc), httpSlice("etp-local", ready(a1, b1))),
				Checks: []Check{
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(false, http(a1))),
					chk("external-lb", ext(lb, portHTTP), fwd(false, http(a1))),
					chk("pod-node-port", pod(nodeIP, nodePortHTTP), fwd(false, http(a1, b1))),
					chk("pod-lb", pod(lb, portHTTP), fwd(false, http(a1, b1))),
					chk("node-node-port", host(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
					chk("node-lb", host(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("pod-cluster-ip", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("external-cluster-ip", ext(vip, portHTTP), fwd(true, http(a1, b1))),
				},
			}, {
				Name:    "remote-only",
				Objects: objs(svcs(svc), httpSlice("etp-local", ready(b1))),
				Checks: []Check{
					chk("external-node-port", ext(nodeIP, nodePortHTTP), dropped),
					chk("external-lb", ext(lb, portHTTP), dropped),
					chk("pod-node-port", pod(nodeIP, nodePortHTTP), fwd(false, http(b1))),
					chk("pod-lb", pod(lb, portHTTP), fwd(false, http(b1))),
					chk("node-node-port", host(nodeIP, nodePortHTTP), fwd(true, http(b1))),
					chk("node-lb", host(lb, portHTTP), fwd(true, http(b1))),
					chk("pod-cluster-ip", pod(vip, portHTTP), fwd(false, http(b1))),
				},
			}, {
				Name:    "no-endpoints",
				Objects: objs(svcs(svc), httpSlice("etp-local", nil)),
				Checks: []Check{
					chk("external-node-port", ext(nodeIP, nodePortHTTP), rejected),
					chk("external-lb", ext(lb, portHTTP), rejected),
					chk("pod-cluster-ip", pod(vip, portHTTP), rejected),
				},
			}},
		})
	}

	// --- internalTrafficPolicy Local ---
	{
		vip := topo.ServiceIP(8)
		svc := web("itp-local", vip, func(s *v1.Service) {
			nodePort(v1.ServiceTypeNodePort, nodePortHTTP)(s)
			s.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
		})
		table = append(table, Scenario{
			Name: "internal-traffic-policy-local",
			Doc:  "internalTrafficPolicy Local: cluster-IP traffic reaches only local endpoints and is dropped when there is none; the node port still uses every endpoint",
			Steps: []Step{{
				Name:    "local-and-remote",
				Objects: objs(svcs(svc), httpSlice("itp-local", ready(a1, b1))),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1))),
					chk("node", host(vip, portHTTP), fwd(true, http(a1))),
					chk("external", ext(vip, portHTTP), fwd(true, http(a1))),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
				},
			}, {
				Name:    "remote-only",
				Objects: objs(svcs(svc), httpSlice("itp-local", ready(b1))),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), dropped),
					chk("node", host(vip, portHTTP), dropped),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(b1))),
				},
			}},
		})
	}

	// --- topology hints ---
	{
		vip := topo.ServiceIP(9)
		svc := web("hints", vip, func(s *v1.Service) {
			s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferClose)
			s.Annotations = map[string]string{proxy.AnnotationTopologyMode: "Auto"}
		})
		hinted := func(p Pod, zones ...string) EndpointSpec {
			return EndpointSpec{Pod: p, ZoneHints: append([]string{}, zones...)}
		}
		hints := []EndpointSpec{hinted(a1, topo.Zone), hinted(b1, topo.RemoteZone), hinted(b2, topo.Zone)}
		onZoneB := objs(svcs(svc), httpSlice("hints", hints))
		onZoneB.Node = MakeNode(topo, topo.RemoteZone)
		table = append(table, Scenario{
			Name: "topology-hints",
			Doc:  "zone hints (trafficDistribution PreferClose) restrict endpoints to the node's zone, all or nothing",
			Steps: []Step{{
				Name:    "hints-for-both-zones",
				Objects: objs(svcs(svc), httpSlice("hints", hints)),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b2))),
					chk("external", ext(vip, portHTTP), fwd(true, http(a1, b2))),
				},
			}, {
				Name:    "one-endpoint-without-hints",
				Objects: objs(svcs(svc), httpSlice("hints", []EndpointSpec{hinted(a1, topo.Zone), hinted(b1, topo.RemoteZone), {Pod: b2}})),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1, b2))),
				},
			}, {
				Name:    "no-hint-for-this-zone",
				Objects: objs(svcs(svc), httpSlice("hints", []EndpointSpec{hinted(a1, topo.RemoteZone), hinted(b1, topo.RemoteZone), hinted(b2, topo.RemoteZone)})),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1, b2))),
				},
			}, {
				Name:    "node-moves-zone",
				Objects: onZoneB,
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(b1))),
				},
			}},
		})
	}

	// --- terminating endpoints ---
	{
		vip := topo.ServiceIP(10)
		svc := web("terminating", vip, nil)
		st := func(e ...[]EndpointSpec) Objects { return objs(svcs(svc), httpSlice("terminating", join(e...))) }
		table = append(table, Scenario{
			Name: "terminating-endpoints",
			Doc:  "terminating endpoints that still serve are used only when no endpoint is ready",
			Steps: []Step{{
				Name:    "ready-and-terminating",
				Objects: st(ready(a1), with(TerminatingServing, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a1)))},
			}, {
				Name:    "all-terminating-serving",
				Objects: st(with(TerminatingServing, a1, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1)))},
			}, {
				Name:    "one-stopped-serving",
				Objects: st(with(TerminatingNotServing, a1), with(TerminatingServing, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(b1)))},
			}, {
				Name:    "none-serving",
				Objects: st(with(TerminatingNotServing, a1, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), rejected)},
			}},
		})
	}
	{
		vip := topo.ServiceIP(11)
		svc := web("terminating-local", vip, func(s *v1.Service) {
			nodePort(v1.ServiceTypeNodePort, nodePortHTTP)(s)
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		})
		table = append(table, Scenario{
			Name: "terminating-local-fallback",
			Doc:  "externalTrafficPolicy Local falls back to a serving terminating local endpoint; cluster traffic prefers the ready remote one",
			Steps: []Step{{
				Name:    "local-terminating-remote-ready",
				Objects: objs(svcs(svc), httpSlice("terminating-local", join(with(TerminatingServing, a1), ready(b1)))),
				Checks: []Check{
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(false, http(a1))),
					chk("pod-cluster-ip", pod(vip, portHTTP), fwd(false, http(b1))),
				},
			}},
		})
	}

	// --- no endpoints, not-ready endpoints ---
	{
		vip := topo.ServiceIP(12)
		svc := web("empty", vip, nodePort(v1.ServiceTypeNodePort, nodePortHTTP))
		rejectAll := []Check{
			chk("pod", pod(vip, portHTTP), rejected),
			chk("node", host(vip, portHTTP), rejected),
			chk("external", ext(vip, portHTTP), rejected),
			chk("external-node-port", ext(nodeIP, nodePortHTTP), rejected),
		}
		table = append(table, Scenario{
			Name: "no-endpoints",
			Doc:  "a service without usable endpoints rejects connections to every one of its addresses",
			Steps: []Step{{
				Name:    "no-slice",
				Objects: objs(svcs(svc)),
				Checks:  rejectAll,
			}, {
				Name:    "empty-slice",
				Objects: objs(svcs(svc), httpSlice("empty", nil)),
				Checks:  rejectAll,
			}, {
				Name:    "endpoint-appears",
				Objects: objs(svcs(svc), httpSlice("empty", ready(a1))),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1))),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(a1))),
				},
			}},
		})
	}
	{
		vip := topo.ServiceIP(13)
		svc := web("not-ready", vip, nil)
		st := func(e ...[]EndpointSpec) Objects { return objs(svcs(svc), httpSlice("not-ready", join(e...))) }
		table = append(table, Scenario{
			Name: "not-ready-endpoints",
			Doc:  "endpoints that are not ready (and not terminating) are never used",
			Steps: []Step{{
				Name:    "one-not-ready",
				Objects: st(ready(a1), with(NotReady, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a1)))},
			}, {
				Name:    "none-ready",
				Objects: st(with(NotReady, a1, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), rejected)},
			}, {
				Name:    "ready-again",
				Objects: st(ready(a1, b1)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1)))},
			}},
		})
	}

	// --- hairpin ---
	{
		vip := topo.ServiceIP(14)
		table = append(table, Scenario{
			Name: "hairpin",
			Doc:  "a pod that reaches itself through its service is masqueraded (so the reply goes back through the node)",
			Steps: []Step{{
				Name:    "client-is-the-endpoint",
				Objects: objs(svcs(web("hairpin", vip, nil)), httpSlice("hairpin", ready(client))),
				Checks: []Check{
					chk("pod-to-itself", pod(vip, portHTTP), fwd(true, http(client))),
					chk("other-pod", From(pod(vip, portHTTP), a1.IP), fwd(false, http(client))),
				},
			}},
		})
	}

	// --- UDP ---
	{
		vip := topo.ServiceIP(15)
		svc := MakeService(topo, "dns", vip, []ServicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: portDNS, TargetPort: targetDNS, NodePort: nodePortDNS}},
			func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
			})
		sl := MakeSlice(topo, "dns", "1", []SlicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: targetDNS}}, ready(a1, b1)...)
		dns := Backends(targetDNS, a1, b1)
		table = append(table, Scenario{
			Name: "udp",
			Doc:  "a UDP service port, by cluster IP and node port",
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(svc), sl),
				Checks: []Check{
					chk("pod", UDP(pod(vip, portDNS)), fwd(false, dns)),
					chk("node", UDP(host(vip, portDNS)), fwd(true, dns)),
					chk("external-node-port", UDP(ext(nodeIP, nodePortDNS)), fwd(true, dns)),
					chk("pod-tcp-same-port", pod(vip, portDNS), notProxied),
				},
			}},
		})
	}

	// --- UDP conntrack: one flow across service and endpoint changes ---
	{
		vip, eip := topo.ServiceIP(26), topo.ExternalIP(3)
		svc := MakeService(topo, "udp-flow", vip, []ServicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: portDNS, TargetPort: targetDNS, NodePort: nodePortDNS}},
			func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{eip.String()}
			})
		sl := func(pods ...Pod) *discovery.EndpointSlice {
			return MakeSlice(topo, "udp-flow", "1", []SlicePortSpec{{Name: "dns", Protocol: v1.ProtocolUDP, Port: targetDNS}}, ready(pods...)...)
		}
		flow := UDP(pod(vip, portDNS))
		flow.SrcPort = 20053
		extFlow := UDP(ext(nodeIP, nodePortDNS))
		extFlow.SrcPort = 20054
		eipFlow := UDP(ext(eip, portDNS))
		eipFlow.SrcPort = 20055
		dns := func(p Pod) Result { return fwd(false, []netip.AddrPort{Backend(p, targetDNS)}) }
		table = append(table, Scenario{
			Name: "udp-conntrack",
			Doc: "one UDP flow (fixed source port) must follow every change: the proxier clears conntrack entries for a " +
				"service that gains endpoints, for removed endpoints (also when none is left, kubernetes#139629) and for " +
				"deleted services, at every frontend (the external IP too, kubernetes#141371)",
			Ordered: true,
			Steps: []Step{{
				Name:    "no-service",
				Objects: objs(nil),
				Checks:  []Check{chk("pod", flow, notProxied)},
			}, {
				Name:    "service-created",
				Objects: objs(svcs(svc), sl(a1)),
				Checks:  []Check{chk("pod", flow, dns(a1)), chk("external-node-port", extFlow, dns(a1))},
			}, {
				Name:    "endpoint-replaced",
				Objects: objs(svcs(svc), sl(a2)),
				Checks:  []Check{chk("pod", flow, dns(a2)), chk("external-node-port", extFlow, dns(a2))},
			}, {
				Name:    "endpoints-gone",
				Objects: objs(svcs(svc), sl()),
				Checks:  []Check{chk("pod", flow, rejected), chk("external-node-port", extFlow, rejected)},
			}, {
				Name:    "endpoint-back",
				Objects: objs(svcs(svc), sl(b2)),
				Checks:  []Check{chk("pod", flow, dns(b2))},
			}, {
				Name:    "endpoint-local",
				Objects: objs(svcs(svc), sl(a1)),
				Checks:  []Check{chk("pod", flow, dns(a1)), chk("external-ip", eipFlow, dns(a1))},
			}, {
				Name:    "service-deleted",
				Objects: objs(nil, sl(a1)),
				Checks:  []Check{chk("pod", flow, notProxied), chk("external-ip", eipFlow, notProxied)},
			}},
		})
	}

	// --- multiple ports ---
	{
		vip := topo.ServiceIP(16)
		two := MakeService(topo, "multi", vip, []ServicePortSpec{
			{Name: "http", Port: portHTTP, TargetPort: targetHTTP},
			{Name: "metrics", Port: portMetrics, TargetPort: targetMetrics},
		}, nil)
		one := MakeService(topo, "multi", vip, httpPorts, nil)
		sl := MakeSlice(topo, "multi", "1", []SlicePortSpec{{Name: "http", Port: targetHTTP}, {Name: "metrics", Port: targetMetrics}}, ready(a1, b1)...)
		table = append(table, Scenario{
			Name: "multiple-ports",
			Doc:  "each named port of a service maps to its own target port",
			Steps: []Step{{
				Name:    "two-ports",
				Objects: objs(svcs(two), sl),
				Checks: []Check{
					chk("http", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("metrics", pod(vip, portMetrics), fwd(false, Backends(targetMetrics, a1, b1))),
				},
			}, {
				Name:    "metrics-port-removed",
				Objects: objs(svcs(one), sl),
				Checks: []Check{
					chk("http", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("metrics", pod(vip, portMetrics), notProxied),
				},
			}},
		})
	}

	// --- changes over time ---
	{
		vip := topo.ServiceIP(17)
		svc80 := web("changing", vip, nil)
		svc82 := MakeService(topo, "changing", vip, []ServicePortSpec{{Name: "http", Port: portChanged, TargetPort: targetMetrics}}, nil)
		sl80 := func(e ...[]EndpointSpec) *discovery.EndpointSlice { return httpSlice("changing", join(e...)) }
		sl82 := func(e ...[]EndpointSpec) *discovery.EndpointSlice {
			return MakeSlice(topo, "changing", "1", []SlicePortSpec{{Name: "http", Port: targetMetrics}}, join(e...)...)
		}
		at80 := pod(vip, portHTTP)
		at82 := pod(vip, portChanged)
		table = append(table, Scenario{
			Name: "changes-over-time",
			Doc:  "one service through endpoint, port, readiness and existence changes; each state must be reflected exactly",
			Steps: []Step{
				{Name: "one-endpoint", Objects: objs(svcs(svc80), sl80(ready(a1))),
					Checks: []Check{chk("pod", at80, fwd(false, http(a1)))}},
				{Name: "endpoint-added", Objects: objs(svcs(svc80), sl80(ready(a1, b1))),
					Checks: []Check{chk("pod", at80, fwd(false, http(a1, b1)))}},
				{Name: "endpoint-removed", Objects: objs(svcs(svc80), sl80(ready(b1))),
					Checks: []Check{chk("pod", at80, fwd(false, http(b1)))}},
				{Name: "port-changed", Objects: objs(svcs(svc82), sl82(ready(b1))),
					Checks: []Check{
						chk("new-port", at82, fwd(false, Backends(targetMetrics, b1))),
						chk("old-port", at80, notProxied),
					}},
				{Name: "endpoint-not-ready", Objects: objs(svcs(svc82), sl82(with(NotReady, b1), ready(a2))),
					Checks: []Check{chk("pod", at82, fwd(false, Backends(targetMetrics, a2)))}},
				{Name: "all-terminating", Objects: objs(svcs(svc82), sl82(with(TerminatingServing, b1, a2))),
					Checks: []Check{chk("pod", at82, fwd(false, Backends(targetMetrics, a2, b1)))}},
				{Name: "service-deleted", Objects: objs(nil, sl82(with(TerminatingServing, b1, a2))),
					Checks: []Check{
						chk("pod", at82, notProxied),
						chk("external", ext(vip, portChanged), notProxied),
					}},
				{Name: "service-recreated", Objects: objs(svcs(svc80), sl80(ready(a1))),
					Checks: []Check{
						chk("pod", at80, fwd(false, http(a1))),
						chk("old-port", at82, notProxied),
					}},
				{Name: "slice-deleted", Objects: objs(svcs(svc80)),
					Checks: []Check{chk("pod", at80, rejected)}},
			},
		})
	}

	// --- service-proxy-name ---
	{
		mineIP, theirsIP := topo.ServiceIP(18), topo.ServiceIP(19)
		labelled := func(s *v1.Service) { s.Labels = map[string]string{proxy.LabelServiceProxyName: OtherProxyName} }
		mine, theirs := web("mine", mineIP, nil), web("theirs", theirsIP, labelled)
		mineLabelled, theirsPlain := web("mine", mineIP, labelled), web("theirs", theirsIP, nil)
		slices := []*discovery.EndpointSlice{httpSlice("mine", ready(a1)), httpSlice("theirs", ready(b1))}
		table = append(table, Scenario{
			Name: "service-proxy-name",
			Doc:  "services labelled service.kubernetes.io/service-proxy-name for another proxy are left alone",
			Steps: []Step{{
				Name:    "theirs-labelled",
				Objects: objs(svcs(mine, theirs), slices...),
				Checks: []Check{
					chk("mine", pod(mineIP, portHTTP), fwd(false, http(a1))),
					chk("theirs", pod(theirsIP, portHTTP), notProxied),
				},
			}, {
				Name:    "label-moved",
				Objects: objs(svcs(mineLabelled, theirsPlain), slices...),
				Checks: []Check{
					chk("mine", pod(mineIP, portHTTP), notProxied),
					chk("theirs", pod(theirsIP, portHTTP), fwd(false, http(b1))),
				},
			}},
		})
	}

	// --- headless ---
	{
		eip := topo.ExternalIP(2)
		svc := web("headless", netip.Addr{}, func(s *v1.Service) { s.Spec.ExternalIPs = []string{eip.String()} })
		sl := httpSlice("headless", ready(a1))
		sl.Labels[proxy.LabelHeadless] = ""
		table = append(table, Scenario{
			Name: "headless",
			Doc:  "headless services (clusterIP None) get no rules at all, not even for their external IPs",
			Steps: []Step{{
				Name:    "one-endpoint",
				Objects: objs(svcs(svc), sl),
				Checks: []Check{
					chk("pod-to-endpoint", pod(a1.IP, targetHTTP), notProxied),
					chk("external-ip", ext(eip, portHTTP), notProxied),
				},
			}},
		})
	}

	// --- several slices per service, and slices to ignore ---
	{
		vip := topo.ServiceIP(21)
		svc := web("sliced", vip, nil)
		first := httpSlice("sliced", ready(a1))
		second := MakeSlice(topo, "sliced", "2", httpSlicePorts, ready(b1)...)
		secondMoved := MakeSlice(topo, "sliced", "2", httpSlicePorts, ready(b1, a2)...)
		// Slices the proxier must ignore: the other address family, FQDN,
		// and one that names no service.
		foreign := MakeSlice(topo, "sliced", "foreign", httpSlicePorts, ready(b2)...)
		if topo.Family == v1.IPv4Protocol {
			foreign.AddressType = discovery.AddressTypeIPv6
			foreign.Endpoints[0].Addresses = []string{"fd00:10:244:2::77"}
		} else {
			foreign.AddressType = discovery.AddressTypeIPv4
			foreign.Endpoints[0].Addresses = []string{"10.244.2.77"}
		}
		fqdn := MakeSlice(topo, "sliced", "fqdn", httpSlicePorts, ready(b2)...)
		fqdn.AddressType = discovery.AddressTypeFQDN
		fqdn.Endpoints[0].Addresses = []string{"backend.example.com"}
		orphan := MakeSlice(topo, "sliced", "orphan", httpSlicePorts, ready(b2)...)
		delete(orphan.Labels, discovery.LabelServiceName)
		table = append(table, Scenario{
			Name: "multiple-slices",
			Doc:  "a service's endpoints are the union of its slices of this family; other families, FQDN slices and slices naming no service are ignored",
			Steps: []Step{{
				Name:    "two-slices",
				Objects: objs(svcs(svc), first, second, foreign, fqdn, orphan),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1)))},
			}, {
				Name:    "endpoint-moves-between-slices",
				Objects: objs(svcs(svc), httpSlice("sliced", ready(b2)), secondMoved, foreign, fqdn, orphan),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(a2, b1, b2)))},
			}, {
				Name:    "first-slice-deleted",
				Objects: objs(svcs(svc), second, foreign, fqdn, orphan),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, http(b1)))},
			}},
		})
	}

	// --- named target port ---
	{
		vip := topo.ServiceIP(22)
		svc := web("named", vip, func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("web") })
		table = append(table, Scenario{
			Name: "named-target-port",
			Doc:  "a named targetPort is resolved by the EndpointSlice's port, not by the service",
			Steps: []Step{{
				Name:    "slice-resolves-port",
				Objects: objs(svcs(svc), MakeSlice(topo, "named", "1", []SlicePortSpec{{Name: "http", Port: targetMetrics}}, ready(a1, b1)...)),
				Checks:  []Check{chk("pod", pod(vip, portHTTP), fwd(false, Backends(targetMetrics, a1, b1)))},
			}},
		})
	}

	// --- load-balancer ipMode Proxy, type changes, source-range changes ---
	{
		vip, lbVIP, lbProxy := topo.ServiceIP(23), topo.LoadBalancerIP(4), topo.LoadBalancerIP(5)
		svc := web("ip-mode", vip, func(s *v1.Service) {
			loadBalancer(lbVIP)(s)
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress,
				v1.LoadBalancerIngress{IP: lbProxy.String(), IPMode: ptr.To(v1.LoadBalancerIPModeProxy)})
		})
		table = append(table, Scenario{
			Name: "load-balancer-ip-mode-proxy",
			Doc:  "ingress IPs with ipMode Proxy are left to the load balancer; ipMode VIP ones are served",
			Steps: []Step{{
				Name:    "one-of-each",
				Objects: objs(svcs(svc), httpSlice("ip-mode", ready(a1, b1))),
				Checks: []Check{
					chk("vip-mode", ext(lbVIP, portHTTP), fwd(true, http(a1, b1))),
					chk("proxy-mode", ext(lbProxy, portHTTP), notProxied),
				},
			}},
		})
	}
	{
		vip, lb := topo.ServiceIP(24), topo.LoadBalancerIP(6)
		clusterIP := web("retyped", vip, nil)
		lbSvc := web("retyped", vip, loadBalancer(lb))
		sl := httpSlice("retyped", ready(a1, b1))
		table = append(table, Scenario{
			Name: "type-changes",
			Doc:  "a service turned into a LoadBalancer and back gains and loses its external addresses",
			Steps: []Step{{
				Name:    "cluster-ip",
				Objects: objs(svcs(clusterIP), sl),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("external-lb", ext(lb, portHTTP), notProxied),
				},
			}, {
				Name:    "load-balancer",
				Objects: objs(svcs(lbSvc), sl),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("external-lb", ext(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("external-node-port", ext(nodeIP, nodePortHTTP), fwd(true, http(a1, b1))),
				},
			}, {
				Name:    "cluster-ip-again",
				Objects: objs(svcs(clusterIP), sl),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(false, http(a1, b1))),
					chk("external-lb", ext(lb, portHTTP), notProxied),
				},
			}},
		})
	}
	{
		vip, lb := topo.ServiceIP(25), topo.LoadBalancerIP(7)
		ranged := func(src netip.Addr) *v1.Service {
			return web("ranges-change", vip, func(s *v1.Service) {
				loadBalancer(lb)(s)
				s.Spec.LoadBalancerSourceRanges = []string{HostPrefix(src).String()}
			})
		}
		sl := httpSlice("ranges-change", ready(a1, b1))
		table = append(table, Scenario{
			Name: "load-balancer-source-range-changes",
			Doc:  "changing or removing loadBalancerSourceRanges takes effect on the next sync",
			Steps: []Step{{
				Name:    "first-client-allowed",
				Objects: objs(svcs(ranged(topo.ExternalClient)), sl),
				Checks: []Check{
					chk("first-client", ext(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("second-client", ext2(lb, portHTTP), dropped),
				},
			}, {
				Name:    "second-client-allowed",
				Objects: objs(svcs(ranged(topo.ExternalClient2)), sl),
				Checks: []Check{
					chk("first-client", ext(lb, portHTTP), dropped),
					chk("second-client", ext2(lb, portHTTP), fwd(true, http(a1, b1))),
				},
			}, {
				Name:    "ranges-removed",
				Objects: objs(svcs(web("ranges-change", vip, loadBalancer(lb))), sl),
				Checks: []Check{
					chk("first-client", ext(lb, portHTTP), fwd(true, http(a1, b1))),
					chk("second-client", ext2(lb, portHTTP), fwd(true, http(a1, b1))),
				},
			}},
		})
	}

	// --- masquerade-all ---
	{
		vip := topo.ServiceIP(20)
		table = append(table, Scenario{
			Name:    "masquerade-all",
			Doc:     "with masquerade-all, even pod traffic to a cluster IP is masqueraded",
			Options: Options{MasqueradeAll: true},
			Steps: []Step{{
				Name:    "two-endpoints",
				Objects: objs(svcs(web("masq-all", vip, nil)), httpSlice("masq-all", ready(a1, b1))),
				Checks: []Check{
					chk("pod", pod(vip, portHTTP), fwd(true, http(a1, b1))),
					chk("node", host(vip, portHTTP), fwd(true, http(a1, b1))),
				},
			}},
		})
	}

	return table
}
