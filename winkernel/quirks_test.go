package winkernel_test

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// conformanceQuirks are the explained differences of HNS from the table,
// derived from the scenarios by rule (one quirk per affected check) so
// that a new scenario gets them too.
func conformanceQuirks(topo proxytest.Topology, scenarios []proxytest.Scenario) []proxytest.Quirk {
	var local []netip.Addr
	for _, p := range append(append([]proxytest.Pod{}, topo.LocalPods...), topo.ClientPod) {
		local = append(local, p.IP)
	}
	var quirks []proxytest.Quirk
	add := func(sc, st, c, reason string, adjust func(proxytest.Result) proxytest.Result) {
		quirks = append(quirks, proxytest.Quirk{Scenario: sc, Step: st, Check: c, Reason: reason, Adjust: adjust})
	}
	notProxied := func(proxytest.Result) proxytest.Result { return proxytest.Result{Verdict: proxytest.NotProxied} }
	for _, sc := range scenarios {
		for _, st := range sc.Steps {
			for _, c := range st.Checks {
				internal := c.Packet.Origin != proxytest.FromExternal
				switch {
				case strings.HasPrefix(sc.Name, "load-balancer-source-range") && c.Want.Verdict == proxytest.Dropped:
					add(sc.Name, st.Name, c.Name, "HNS load balancers have no source filter: loadBalancerSourceRanges is not enforced (as upstream winkernel)", nil)
				case c.Want.Verdict == proxytest.Rejected:
					add(sc.Name, st.Name, c.Name, "HNS has no reject: a service with no endpoints gets no load balancer, so the packet is not proxied (and is lost in routing: no host owns a service address)", notProxied)
				case c.Want.Verdict == proxytest.Dropped:
					add(sc.Name, st.Name, c.Name, "HNS drops nothing itself: with no usable endpoint there is no load balancer and the packet is not proxied", notProxied)
				case sc.Name == "external-traffic-policy-local" && internal && !topo.ServiceCIDR.Contains(c.Packet.Dst) && c.Want.Verdict == proxytest.Forwarded:
					add(sc.Name, st.Name, c.Name, "externalTrafficPolicy: Local on HNS is one DSR load balancer with the local endpoints, whoever the client: no short-circuit of in-node traffic to the cluster endpoints", func(want proxytest.Result) proxytest.Result {
						var kept []netip.AddrPort
						for _, b := range want.Backends {
							if slices.Contains(local, b.Addr()) {
								kept = append(kept, b)
							}
						}
						if len(kept) == 0 {
							return proxytest.Result{Verdict: proxytest.NotProxied}
						}
						return proxytest.Result{Verdict: proxytest.Forwarded, Backends: kept, Sticky: want.Sticky}
					})
				case sc.Name == "hairpin" && c.Want.Masquerade && c.Packet.Origin == proxytest.FromPod:
					add(sc.Name, st.Name, c.Name, "hairpin SNAT of a pod reaching itself through a cluster IP is done by HNS's virtual filtering platform, not by an LB setting; the tracer does not model it and it cannot be verified without a Windows host", nil)
				}
			}
		}
	}
	return quirks
}
