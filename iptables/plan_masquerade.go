package iptables

import (
	"fmt"

	"github.com/svcproxy/svcproxy/iptables/xtables"
)

// planInternalMasquerade marks cluster-IP traffic for masquerading when it
// may not come back through this node: all of it with MasqueradeAll, else
// what does not come from a local pod (e.g. a client routed to the service
// CIDR through this node). Without local detection nothing is marked. The
// rule comes first in the internal traffic chain.
func planInternalMasquerade(env *planEnv, svc *servicePortInfo, d *decision, rules *lineWriter) {
	if !d.hasInternalEndpoints || !svc.ClusterIP().IsValid() {
		return
	}
	if !env.masqueradeAll && env.ifNotLocal == nil {
		return
	}
	w := rules.rule(d.internalChain).comment(svc.nameStr, " cluster IP").proto(svc.protocol).
		w("-d", svc.ClusterIP().String(), "--dport", portString(svc.Port()))
	if !env.masqueradeAll {
		w.w(env.ifNotLocal...)
	}
	w.jump(string(xtables.ChainKubeMarkMasq))
}

// masqMark renders the fwmark of bit as "0x4000".
func masqMark(bit int) string {
	return fmt.Sprintf("%#08x", 1<<uint(bit))
}

// writeFixedNATRules writes the rules of the fixed nat chains: packets
// marked by KUBE-MARK-MASQ are masqueraded in KUBE-POSTROUTING (the mark is
// cleared first so that a re-traversal does not masquerade twice).
func writeFixedNATRules(w *lineWriter, mark string, randomFully bool) {
	w.rule(xtables.ChainKubePostrouting).w("-m", "mark", "!", "--mark", mark+"/"+mark).jump("RETURN")
	w.rule(xtables.ChainKubePostrouting).w("-j", "MARK", "--xor-mark", mark).end()
	m := w.rule(xtables.ChainKubePostrouting).comment("kubernetes service traffic requiring SNAT").w("-j", "MASQUERADE")
	if randomFully {
		m.w("--random-fully")
	}
	m.end()
	w.rule(xtables.ChainKubeMarkMasq).w("-j", "MARK", "--or-mark", mark).end()
}

// writeFixedFilterRules writes KUBE-FORWARD: invalid conntrack state is
// dropped (a spurious retransmit must not reach the pod un-NATed), marked
// and established traffic is accepted even when the FORWARD policy is DROP.
func writeFixedFilterRules(w *lineWriter, mark string) {
	w.rule(xtables.ChainKubeForward).w("-m", "conntrack", "--ctstate", "INVALID").jump("DROP")
	w.rule(xtables.ChainKubeForward).comment("kubernetes forwarding rules").w("-m", "mark", "--mark", mark+"/"+mark).jump("ACCEPT")
	w.rule(xtables.ChainKubeForward).comment("kubernetes forwarding conntrack rule").w("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED").jump("ACCEPT")
}

// fixedChains are declared (and so flushed) by every full sync.
var fixedFilterChains = []xtables.Chain{ChainKubeNodePorts, xtables.ChainKubeServices, ChainKubeExternalServices, xtables.ChainKubeForward, xtables.ChainKubeProxyFirewall}
var fixedNATChains = []xtables.Chain{ChainKubeNodePorts, xtables.ChainKubeServices, xtables.ChainKubeMarkMasq, xtables.ChainKubePostrouting}

// jumpRules are kube-proxy's: the same tables, chains, matches and comments,
// so that either can clean up after the other.
var jumpRules = []xtables.JumpRule{
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainKubeExternalServices, Comment: "kubernetes externally-visible service portals", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: ChainKubeExternalServices, Comment: "kubernetes externally-visible service portals", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainKubeNodePorts, Comment: "kubernetes health check service ports"},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: xtables.ChainKubeServices, Comment: "kubernetes service portals", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainOutput, To: xtables.ChainKubeServices, Comment: "kubernetes service portals", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: xtables.ChainKubeForward, Comment: "kubernetes forwarding rules"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: xtables.ChainKubeProxyFirewall, Comment: "kubernetes load balancer firewall", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainOutput, To: xtables.ChainKubeProxyFirewall, Comment: "kubernetes load balancer firewall", Match: ctNew},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: xtables.ChainKubeProxyFirewall, Comment: "kubernetes load balancer firewall", Match: ctNew},
	{Table: xtables.TableNAT, From: xtables.ChainOutput, To: xtables.ChainKubeServices, Comment: "kubernetes service portals"},
	{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: xtables.ChainKubeServices, Comment: "kubernetes service portals"},
	{Table: xtables.TableNAT, From: xtables.ChainPostrouting, To: xtables.ChainKubePostrouting, Comment: "kubernetes postrouting rules"},
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// canaryTables hold KUBE-PROXY-CANARY.
var canaryTables = []xtables.Table{xtables.TableMangle, xtables.TableNAT, xtables.TableFilter}
