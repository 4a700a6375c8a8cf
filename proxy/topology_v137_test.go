package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
)

// ue is one endpoint of the upstream-mirroring table: "ip:port" plus flags
// R (ready), S (serving), T (terminating), L (local), and hints.
type ue struct {
	addr         string
	flags        string
	zones, nodes []string
}

func (u ue) endpoint() *BaseEndpoint {
	ap := netip.MustParseAddrPort(u.addr)
	e := &BaseEndpoint{
		Addr: ap.Addr(), PortNum: int(ap.Port()),
		Ready: strings.Contains(u.flags, "R"), Serving: strings.Contains(u.flags, "S"),
		Terminating: strings.Contains(u.flags, "T"), Local: strings.Contains(u.flags, "L"),
	}
	if u.zones != nil {
		e.Zones = sets.New(u.zones...)
	}
	if u.nodes != nil {
		e.Nodes = sets.New(u.nodes...)
	}
	return e
}

// TestCategorizeEndpointsAsV137 holds the cases of upstream kube-proxy
// v1.37.2's TestCategorizeEndpoints (pkg/proxy/topology_test.go), with the
// results v1.37.2 gives in production: PreferSameTrafficDistribution is GA
// and locked on there (1.35), so node hints always count; the one upstream
// case that runs with the gate off under 1.34 emulation is kept with the
// locked-on answer. Endpoint sets are compared as sets, and "none" (nil or
// empty) as none, as upstream compares them; a nil want for all means "the
// only non-empty one of cluster and local", as upstream's table does.
func TestCategorizeEndpointsAsV137(t *testing.T) {
	zone := func(z string) map[string]string { return map[string]string{LabelTopologyZone: z} }
	hinted := func(prefix string, hints ...string) []ue { // ready endpoints .3-.6 with one zone hint each
		var out []ue
		for i, h := range hints {
			out = append(out, ue{addr: prefix + string(rune('3'+i)) + ":80", flags: "R", zones: []string{h}})
		}
		return out
	}
	withNodes := func(eps []ue, nodes ...string) []ue {
		for i := range eps {
			if nodes[i] != "" {
				eps[i].nodes = []string{nodes[i]}
			} else {
				eps[i].zones = nil
			}
		}
		return eps
	}
	local := func(eps []ue, which ...int) []ue {
		for _, i := range which {
			eps[i].flags += "L"
		}
		return eps
	}
	clusterSvc := svc()
	etpLocal := svc(externalLocal)
	itpLocalNP := svc(internalLocal, func(s *BaseServicePort) { s.NodePortNum = 8080 })
	itpLocal := svc(internalLocal)
	bothLocal := svc(internalLocal, externalLocal)
	etpLocalNoNodePort := svc(func(s *BaseServicePort) { s.ExternalLocal = true })

	tests := []struct {
		name                string
		nodeName            string
		labels              map[string]string
		svc                 *BaseServicePort
		eps                 []ue
		cluster, local, all []string
		onlyRemoteEndpoints bool
	}{{
		name:   "topology used: every endpoint hinted, node has a zone, endpoints for it",
		labels: zone("zone-a"), svc: clusterSvc,
		eps:     hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"),
		cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
	}, {
		name:   "externalTrafficPolicy Local: topology ignored for local endpoints",
		labels: zone("zone-a"), svc: etpLocal,
		eps:     local(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), 0, 1),
		cluster: []string{"10.1.2.3:80", "10.1.2.6:80"}, local: []string{"10.1.2.3:80", "10.1.2.4:80"},
		all: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
	}, {
		name:   "internalTrafficPolicy Local: topology ignored for local endpoints",
		labels: zone("zone-a"), svc: itpLocalNP,
		eps:     local(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), 0, 1),
		cluster: []string{"10.1.2.3:80", "10.1.2.6:80"}, local: []string{"10.1.2.3:80", "10.1.2.4:80"},
		all: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
	}, {
		name:   "empty node labels",
		labels: map[string]string{}, svc: clusterSvc,
		eps:     hinted("10.1.2.", "zone-a"),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name:   "empty zone label",
		labels: zone(""), svc: clusterSvc,
		eps:     hinted("10.1.2.", "zone-a"),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name:   "node in a different zone: no filtering",
		labels: zone("zone-b"), svc: clusterSvc,
		eps:     hinted("10.1.2.", "zone-a"),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name:   "unready endpoint",
		labels: zone("zone-a"), svc: clusterSvc,
		eps: func() []ue {
			e := hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a")
			e[3].flags = ""
			return e
		}(),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name:   "only unready endpoints in the node's zone: no filtering",
		labels: zone("zone-a"), svc: clusterSvc,
		eps: func() []ue {
			e := hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a")
			e[0].flags, e[3].flags = "", ""
			return e
		}(),
		cluster: []string{"10.1.2.4:80", "10.1.2.5:80"},
	}, {
		name:   "a missing hint: no filtering",
		labels: zone("zone-a"), svc: clusterSvc,
		eps: func() []ue {
			e := hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a")
			e[2].zones = nil
			return e
		}(),
		cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
	}, {
		name:   "several hints per endpoint: any endpoint hinted for the zone",
		labels: zone("zone-c"), svc: clusterSvc,
		eps: []ue{
			{addr: "10.1.2.3:80", flags: "R", zones: []string{"zone-a", "zone-b", "zone-c"}},
			{addr: "10.1.2.4:80", flags: "R", zones: []string{"zone-b", "zone-c"}},
			{addr: "10.1.2.5:80", flags: "R", zones: []string{"zone-b", "zone-d"}},
			{addr: "10.1.2.6:80", flags: "R", zones: []string{"zone-c"}},
		},
		cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.6:80"},
	}, {
		// Upstream runs this one with the gate off (1.34 emulation) and
		// wants the zone's two; in v1.37.2 the gate is locked on.
		name: "node hints with the gate locked on (upstream's gate-off case)", nodeName: "node-1",
		labels: zone("zone-a"), svc: clusterSvc,
		eps:     withNodes(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), "node-1", "node-2", "node-3", "node-4"),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name: "PreferSameNode available", nodeName: "node-1",
		labels: zone("zone-a"), svc: clusterSvc,
		eps:     withNodes(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), "node-1", "node-2", "node-3", "node-4"),
		cluster: []string{"10.1.2.3:80"},
	}, {
		name: "PreferSameNode ignored if some endpoints are unhinted", nodeName: "node-1",
		labels: zone("zone-a"), svc: clusterSvc,
		eps:     withNodes(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), "node-1", "", "node-3", "node-4"),
		cluster: []string{"10.1.2.3:80", "10.1.2.4:80", "10.1.2.5:80", "10.1.2.6:80"},
	}, {
		name: "PreferSameNode falls back to PreferSameZone without an endpoint for the node", nodeName: "node-0",
		labels: zone("zone-a"), svc: clusterSvc,
		eps:     withNodes(hinted("10.1.2.", "zone-a", "zone-b", "zone-c", "zone-a"), "node-1", "node-2", "node-3", "node-4"),
		cluster: []string{"10.1.2.3:80", "10.1.2.6:80"},
	}, {
		name:   "conflicting topology and localness merge into all",
		labels: zone("zone-a"), svc: etpLocal,
		eps:     local(hinted("10.0.0.", "zone-a", "zone-b", "zone-a", "zone-b"), 0, 1),
		cluster: []string{"10.0.0.3:80", "10.0.0.5:80"}, local: []string{"10.0.0.3:80", "10.0.0.4:80"},
		all: []string{"10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"},
	}, {
		name: "internalTrafficPolicy Local with no endpoints", svc: itpLocal,
	}, {
		name: "internalTrafficPolicy Local, every endpoint remote", svc: itpLocal,
		eps:                 []ue{{addr: "10.0.0.0:80", flags: "R"}, {addr: "10.0.0.1:80", flags: "R"}},
		onlyRemoteEndpoints: true,
	}, {
		name: "internalTrafficPolicy Local, every endpoint local", svc: itpLocal,
		eps:   []ue{{addr: "10.0.0.0:80", flags: "RL"}, {addr: "10.0.0.1:80", flags: "RL"}},
		local: []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "internalTrafficPolicy Local, some endpoints local", svc: itpLocal,
		eps:   []ue{{addr: "10.0.0.0:80", flags: "RL"}, {addr: "10.0.0.1:80", flags: "R"}},
		local: []string{"10.0.0.0:80"},
	}, {
		name: "Cluster policy, no endpoint ready", svc: clusterSvc,
		eps: []ue{{addr: "10.0.0.0:80"}, {addr: "10.0.0.1:80"}},
	}, {
		name: "Cluster policy, some endpoints ready", svc: clusterSvc,
		eps:     []ue{{addr: "10.0.0.0:80"}, {addr: "10.0.0.1:80", flags: "R"}},
		cluster: []string{"10.0.0.1:80"},
	}, {
		name: "Cluster policy, every endpoint terminating", svc: clusterSvc,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "STL"}, {addr: "10.0.0.1:80", flags: "ST"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "iTP Local, eTP Cluster, some endpoints local", svc: itpLocalNP,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "RL"}, {addr: "10.0.0.1:80", flags: "R"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"}, local: []string{"10.0.0.0:80"},
		all: []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "iTP Cluster, eTP Local, some endpoints local", svc: etpLocal,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "RL"}, {addr: "10.0.0.1:80", flags: "R"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"}, local: []string{"10.0.0.0:80"},
		all: []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "iTP Local, eTP Local, some endpoints local", svc: bothLocal,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "RL"}, {addr: "10.0.0.1:80", flags: "R"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"}, local: []string{"10.0.0.0:80"},
		all: []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "iTP Local, eTP Local, every endpoint remote", svc: bothLocal,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "R"}, {addr: "10.0.0.1:80", flags: "R"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
		all:     []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "iTP Local, eTP Local, every endpoint remote and terminating", svc: bothLocal,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "ST"}, {addr: "10.0.0.1:80", flags: "ST"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
		all:     []string{"10.0.0.0:80", "10.0.0.1:80"}, onlyRemoteEndpoints: true,
	}, {
		name: "iTP Cluster, eTP Local, with terminating endpoints", svc: etpLocal,
		eps: []ue{{addr: "10.0.0.0:80", flags: "R"}, {addr: "10.0.0.1:80", flags: "L"},
			{addr: "10.0.0.2:80", flags: "STL"}, {addr: "10.0.0.3:80", flags: "ST"}},
		cluster: []string{"10.0.0.0:80"}, local: []string{"10.0.0.2:80"},
		all: []string{"10.0.0.0:80", "10.0.0.2:80"},
	}, {
		name: "externalTrafficPolicy ignored without external access", svc: etpLocalNoNodePort,
		eps:     []ue{{addr: "10.0.0.0:80", flags: "R"}, {addr: "10.0.0.1:80", flags: "RL"}},
		cluster: []string{"10.0.0.0:80", "10.0.0.1:80"},
		all:     []string{"10.0.0.0:80", "10.0.0.1:80"},
	}, {
		name: "no cluster endpoints for an iTP Local internal-only service", svc: itpLocal,
		eps:   []ue{{addr: "10.0.0.0:80", flags: "R"}, {addr: "10.0.0.1:80", flags: "RL"}},
		local: []string{"10.0.0.1:80"}, all: []string{"10.0.0.1:80"},
	}, {
		name: "no endpoints at all", svc: clusterSvc,
	}, {
		name:   "one endpoint neither ready, serving nor terminating",
		labels: zone("zone-a"), svc: clusterSvc,
		eps: []ue{{addr: "10.0.0.0:80"}},
	}}
	asSet := func(eps []Endpoint) sets.Set[string] {
		s := sets.New[string]()
		for _, e := range eps {
			s.Insert(e.String())
		}
		return s
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in []Endpoint
			for _, u := range tc.eps {
				in = append(in, u.endpoint())
			}
			cluster, local, all, hasAny := CategorizeEndpoints(in, tc.svc, tc.nodeName, tc.labels)
			check := func(what string, got []Endpoint, want []string) {
				if g, w := asSet(got), sets.New(want...); !g.Equal(w) {
					t.Errorf("%s = %v, want %v", what, sets.List(g), sets.List(w))
				}
			}
			check("clusterEndpoints", cluster, tc.cluster)
			check("localEndpoints", local, tc.local)
			wantAll := tc.all
			switch {
			case len(tc.cluster) != 0 && len(tc.local) == 0:
				wantAll = tc.cluster
			case len(tc.local) != 0 && len(tc.cluster) == 0:
				wantAll = tc.local
			}
			check("allReachableEndpoints", all, wantAll)
			if want := len(wantAll) > 0 || tc.onlyRemoteEndpoints; hasAny != want {
				t.Errorf("hasAnyEndpoints = %v, want %v", hasAny, want)
			}
		})
	}
}
