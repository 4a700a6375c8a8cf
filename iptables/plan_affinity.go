package iptables

import (
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// planServiceToEndpoints writes a KUBE-SVC or KUBE-SVL chain: with ClientIP
// session affinity, first one "-m recent --rcheck" rule per endpoint that
// sends a client seen within the timeout back to its endpoint; then the
// random spread, endpoint i of n taken with probability 1/(n-i), the last
// one unconditionally.
//
// In large clusters (env.terse) the per-endpoint comments are left out, as
// kube-proxy does above 1,000 endpoints: they are a third of the bytes.
func planServiceToEndpoints(env *planEnv, svc *servicePortInfo, chain xtables.Chain, endpoints []proxy.Endpoint, rules *lineWriter) {
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		timeout := strconv.Itoa(svc.StickyMaxAgeSeconds())
		for _, ep := range endpoints {
			epChain, epStr, _ := epStrings(svc.name, ep)
			w := rules.rule(chain)
			if !env.terse {
				w.comment(svc.nameStr, " -> ", epStr)
			}
			w.w("-m", "recent", "--name", string(epChain), "--rcheck", "--seconds", timeout, "--reap").
				jump(string(epChain))
		}
	}
	n := len(endpoints)
	for i, ep := range endpoints {
		epChain, epStr, _ := epStrings(svc.name, ep)
		w := rules.rule(chain)
		if !env.terse {
			w.comment(svc.nameStr, " -> ", epStr)
		}
		if i < n-1 {
			w.w("-m", "statistic", "--mode", "random", "--probability", env.probability(n-i))
		}
		w.jump(string(epChain))
	}
}

// planEndpointChain writes a KUBE-SEP chain: hairpin traffic (the endpoint
// reaching itself through the service) is masqueraded, the client is
// recorded for session affinity, and the packet is DNATed.
func planEndpointChain(env *planEnv, svc *servicePortInfo, ep proxy.Endpoint, rules *lineWriter) xtables.Chain {
	epChain, epStr, epIP := epStrings(svc.name, ep)
	w := rules.rule(epChain)
	if !env.terse {
		w.comment(svc.nameStr)
	}
	w.w("-s", epIP).jump(string(xtables.ChainKubeMarkMasq))
	w = rules.rule(epChain)
	if !env.terse {
		w.comment(svc.nameStr)
	}
	if svc.SessionAffinityType() == v1.ServiceAffinityClientIP {
		w.w("-m", "recent", "--name", string(epChain), "--set")
	}
	w.proto(svc.protocol).jumpWith("DNAT", "--to-destination", epStr)
	return epChain
}

// probability is 1/k as the statistic match's --probability value (ten
// decimals, as kube-proxy writes it), formatted once per k: formatting a
// float per endpoint rule showed in BenchmarkSyncFull's profile.
func (env *planEnv) probability(k int) string {
	if k < len(env.probabilities) && env.probabilities[k] != "" {
		return env.probabilities[k]
	}
	v := strconv.FormatFloat(1.0/float64(k), 'f', 10, 64)
	if k < 1024 {
		if k >= len(env.probabilities) {
			env.probabilities = append(env.probabilities, make([]string, k+1-len(env.probabilities))...)
		}
		env.probabilities[k] = v
	}
	return v
}
