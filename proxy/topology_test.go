package proxy

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ep builds a test endpoint "10.0.0.<n>:80"; flags: "local", "notready",
// "terminating", "notserving".
func ep(n int, flags ...string) *BaseEndpoint {
	e := &BaseEndpoint{
		Addr:    netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}),
		PortNum: 80,
		Ready:   true,
		Serving: true,
	}
	for _, f := range flags {
		switch f {
		case "local":
			e.Local = true
		case "notready":
			e.Ready = false
		case "terminating":
			e.Terminating = true
			e.Ready = false
		case "notserving":
			e.Serving = false
		default:
			panic("unknown flag " + f)
		}
	}
	return e
}

func zones(e *BaseEndpoint, z ...string) *BaseEndpoint { e.Zones = sets.New(z...); return e }
func nodes(e *BaseEndpoint, n ...string) *BaseEndpoint { e.Nodes = sets.New(n...); return e }

func strs(eps []Endpoint) []string {
	if eps == nil {
		return nil
	}
	out := []string{}
	for _, e := range eps {
		out = append(out, e.String())
	}
	return out
}

func addrs(ns ...int) []string {
	out := []string{}
	for _, n := range ns {
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(n)}), 80).String())
	}
	return out
}

type svcOpt func(*BaseServicePort)

func svc(opts ...svcOpt) *BaseServicePort {
	s := &BaseServicePort{ClusterIPAddr: netip.MustParseAddr("172.30.0.1"), PortNum: 80, ProtocolValue: v1.ProtocolTCP}
	for _, o := range opts {
		o(s)
	}
	return s
}

var (
	internalLocal = func(s *BaseServicePort) { s.InternalLocal = true }
	externalLocal = func(s *BaseServicePort) { s.ExternalLocal = true; s.NodePortNum = 30080 }
	preferClose   = func(s *BaseServicePort) { s.TrafficDistributionValue = v1.ServiceTrafficDistributionPreferClose }
	preferNode    = func(s *BaseServicePort) { s.TrafficDistributionValue = v1.ServiceTrafficDistributionPreferSameNode }
	annotations   = func(kv ...string) svcOpt {
		return func(s *BaseServicePort) {
			s.AnnotationsValue = map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				s.AnnotationsValue[kv[i]] = kv[i+1]
			}
		}
	}
)

func TestCategorizeEndpoints(t *testing.T) {
	zoneA := map[string]string{LabelTopologyZone: "zone-a"}
	tests := []struct {
		name                      string
		svc                       *BaseServicePort
		nodeLabels                map[string]string
		endpoints                 []*BaseEndpoint
		cluster, local, reachable []string // nil: expect nil
		hasAny                    bool
	}{{
		name:      "no endpoints gives nothing",
		svc:       svc(),
		endpoints: nil,
	}, {
		name:      "cluster policy uses every ready endpoint",
		svc:       svc(),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local"), ep(3, "notready", "notserving")},
		cluster:   addrs(1, 2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:      "no ready endpoint falls back to serving terminating ones",
		svc:       svc(),
		endpoints: []*BaseEndpoint{ep(1, "terminating"), ep(2, "terminating", "notserving"), ep(3, "notready", "notserving")},
		cluster:   addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:      "terminating endpoints are not used while a ready one exists",
		svc:       svc(),
		endpoints: []*BaseEndpoint{ep(1, "terminating"), ep(2)},
		cluster:   addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:      "only not-serving endpoints means no endpoints",
		svc:       svc(),
		endpoints: []*BaseEndpoint{ep(1, "terminating", "notserving"), ep(2, "notready", "notserving")},
		cluster:   []string{}, reachable: []string{}, hasAny: false,
	}, {
		name:      "internal policy Local uses only local ready endpoints",
		svc:       svc(internalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local"), ep(3, "local", "notready", "notserving")},
		local:     addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:      "internal policy Local falls back to local serving terminating endpoints",
		svc:       svc(internalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local", "terminating")},
		local:     addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:      "internal policy Local with only remote endpoints has endpoints but none local",
		svc:       svc(internalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "terminating")},
		local:     nil, reachable: nil, hasAny: true,
	}, {
		name:      "remote terminating endpoints count as existing endpoints under Local policy",
		svc:       svc(internalLocal),
		endpoints: []*BaseEndpoint{ep(1, "terminating")},
		hasAny:    true,
	}, {
		name:      "external policy Local keeps cluster endpoints for internal traffic",
		svc:       svc(externalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local")},
		cluster:   addrs(1, 2), local: addrs(2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:      "external policy Local with only terminating local endpoints reaches them too",
		svc:       svc(externalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local", "terminating")},
		cluster:   addrs(1), local: addrs(2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:      "external policy Local without external access is ignored",
		svc:       svc(func(s *BaseServicePort) { s.ExternalLocal = true }),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local")},
		cluster:   addrs(1, 2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:      "both policies Local on a node port still compute cluster endpoints for short-circuited traffic",
		svc:       svc(externalLocal, internalLocal),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local")},
		cluster:   addrs(1, 2), local: addrs(2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:      "both policies Local without external access use only local endpoints",
		svc:       svc(internalLocal, func(s *BaseServicePort) { s.ExternalLocal = true }),
		endpoints: []*BaseEndpoint{ep(1), ep(2, "local")},
		local:     addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:       "zone hints are used with trafficDistribution PreferClose",
		svc:        svc(preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b"), zones(ep(3), "zone-a", "zone-b")},
		cluster:    addrs(1, 3), reachable: addrs(1, 3), hasAny: true,
	}, {
		name:       "zone hints are used with trafficDistribution PreferSameZone",
		svc:        svc(func(s *BaseServicePort) { s.TrafficDistributionValue = v1.ServiceTrafficDistributionPreferSameZone }),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "zone hints are used whenever every ready endpoint carries them, as upstream",
		svc:        svc(),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "zone hints are used with topology-mode Auto",
		svc:        svc(annotations(AnnotationTopologyMode, "Auto")),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "deprecated topology-aware-hints auto is honoured",
		svc:        svc(annotations(AnnotationTopologyAwareHints, "auto")),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "one ready endpoint without zone hints disables topology",
		svc:        svc(preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b"), ep(3)},
		cluster:    addrs(1, 2, 3), reachable: addrs(1, 2, 3), hasAny: true,
	}, {
		name:       "a not-ready endpoint without hints does not disable topology",
		svc:        svc(preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b"), ep(3, "notready", "notserving")},
		cluster:    addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "no endpoint hinted for this zone disables topology",
		svc:        svc(preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-b"), zones(ep(2), "zone-c")},
		cluster:    addrs(1, 2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:       "a node without a zone label disables topology",
		svc:        svc(preferClose),
		nodeLabels: nil,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(1, 2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:       "node hints are used with PreferSameNode",
		svc:        svc(preferNode),
		nodeLabels: zoneA,
		endpoints: []*BaseEndpoint{
			nodes(zones(ep(1), "zone-a"), "node-1"), nodes(zones(ep(2), "zone-a"), "node-2"), nodes(zones(ep(3), "zone-b"), "node-3"),
		},
		cluster: addrs(1), reachable: addrs(1), hasAny: true,
	}, {
		name:       "no endpoint hinted for this node falls back to zone hints",
		svc:        svc(preferNode),
		nodeLabels: zoneA,
		endpoints: []*BaseEndpoint{
			nodes(zones(ep(2), "zone-a"), "node-2"), nodes(zones(ep(3), "zone-b"), "node-3"),
		},
		cluster: addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:       "an endpoint without node hints falls back to zone hints",
		svc:        svc(preferNode),
		nodeLabels: zoneA,
		endpoints: []*BaseEndpoint{
			nodes(zones(ep(1), "zone-a"), "node-1"), zones(ep(2), "zone-a"), zones(ep(3), "zone-b"),
		},
		cluster: addrs(1, 2), reachable: addrs(1, 2), hasAny: true,
	}, {
		name:       "topology never leaves only terminating endpoints while ready ones exist",
		svc:        svc(preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1, "terminating"), "zone-a"), zones(ep(2), "zone-b")},
		cluster:    addrs(2), reachable: addrs(2), hasAny: true,
	}, {
		name:       "external policy Local with topology reaches local endpoints of other zones",
		svc:        svc(externalLocal, preferClose),
		nodeLabels: zoneA,
		endpoints:  []*BaseEndpoint{zones(ep(1), "zone-a"), zones(ep(2, "local"), "zone-b")},
		cluster:    addrs(1), local: addrs(2), reachable: addrs(1, 2), hasAny: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in []Endpoint
			for _, e := range tc.endpoints {
				in = append(in, e)
			}
			before := slices.Clone(in)
			cluster, local, reachable, hasAny := CategorizeEndpoints(in, tc.svc, "node-1", tc.nodeLabels)
			if got := strs(cluster); !slices.Equal(got, tc.cluster) || (got == nil) != (tc.cluster == nil) {
				t.Errorf("clusterEndpoints = %q, want %q", got, tc.cluster)
			}
			if got := strs(local); !slices.Equal(got, tc.local) || (got == nil) != (tc.local == nil) {
				t.Errorf("localEndpoints = %q, want %q", got, tc.local)
			}
			if got := strs(reachable); !slices.Equal(got, tc.reachable) || (got == nil) != (tc.reachable == nil) {
				t.Errorf("allReachableEndpoints = %q, want %q", got, tc.reachable)
			}
			if hasAny != tc.hasAny {
				t.Errorf("hasAnyEndpoints = %v, want %v", hasAny, tc.hasAny)
			}
			if !slices.Equal(in, before) {
				t.Error("input slice was modified")
			}
			// The shared variant gives the same results; a result that
			// keeps every endpoint is the input, clipped; any other is new.
			sc, sl, sr, sAny := CategorizeEndpointsShared(in, tc.svc, "node-1", tc.nodeLabels)
			for _, r := range []struct {
				what           string
				shared, copied []Endpoint
			}{{"cluster", sc, cluster}, {"local", sl, local}, {"reachable", sr, reachable}} {
				if !slices.Equal(r.shared, r.copied) || (r.shared == nil) != (r.copied == nil) {
					t.Errorf("shared %s = %q, want %q", r.what, strs(r.shared), strs(r.copied))
				}
				switch {
				case len(r.shared) == 0:
				case len(r.shared) == len(in) && (&r.shared[0] != &in[0] || cap(r.shared) != len(in)):
					t.Errorf("shared %s keeps every endpoint but is not the input, clipped", r.what)
				case len(r.shared) < len(in) && &r.shared[0] == &in[0]:
					t.Errorf("shared %s keeps some endpoints but aliases the input", r.what)
				}
			}
			if sAny != hasAny {
				t.Errorf("shared hasAnyEndpoints = %v, want %v", sAny, hasAny)
			}
		})
	}
}
