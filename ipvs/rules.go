package ipvs

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy"
)

// The chains of the IPVS proxier's fixed iptables ruleset (kube-proxy's names).
const (
	ChainServices           xtables.Chain = xtables.ChainKubeServices
	ChainPostrouting        xtables.Chain = xtables.ChainKubePostrouting
	ChainMarkMasq           xtables.Chain = xtables.ChainKubeMarkMasq
	ChainNodePort           xtables.Chain = "KUBE-NODE-PORT"
	ChainLoadBalancer       xtables.Chain = "KUBE-LOAD-BALANCER"
	ChainForward            xtables.Chain = xtables.ChainKubeForward
	ChainProxyFirewall      xtables.Chain = xtables.ChainKubeProxyFirewall
	ChainSourceRangesFirewl xtables.Chain = "KUBE-SOURCE-RANGES-FIREWALL"
	ChainIPVSFilter         xtables.Chain = "KUBE-IPVS-FILTER"
)

// natChains and filterChains are created (and flushed by every restore).
var (
	natChains    = []xtables.Chain{ChainServices, ChainPostrouting, ChainNodePort, ChainLoadBalancer, ChainMarkMasq}
	filterChains = []xtables.Chain{ChainForward, ChainNodePort, ChainProxyFirewall, ChainSourceRangesFirewl, ChainIPVSFilter}
)

// jumpRules hook our chains into the built-in ones (kube-proxy's comments,
// so either can clean up after the other).
var jumpRules = []xtables.JumpRule{
	{Table: xtables.TableNAT, From: xtables.ChainOutput, To: ChainServices, Comment: "kubernetes service portals"},
	{Table: xtables.TableNAT, From: xtables.ChainPrerouting, To: ChainServices, Comment: "kubernetes service portals"},
	{Table: xtables.TableNAT, From: xtables.ChainPostrouting, To: ChainPostrouting, Comment: "kubernetes postrouting rules"},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: ChainForward, Comment: "kubernetes forwarding rules"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainNodePort, Comment: "kubernetes health check rules"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainProxyFirewall, Comment: "kube-proxy firewall rules"},
	{Table: xtables.TableFilter, From: xtables.ChainForward, To: ChainProxyFirewall, Comment: "kube-proxy firewall rules"},
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainIPVSFilter, Comment: "kubernetes ipvs access filter"},
}

// masqMark is the KUBE-MARK-MASQ mark as "0x4000/0x4000" and its value.
func masqMark(bit int) (mark, value string) {
	v := uint32(1) << uint(bit)
	return fmt.Sprintf("%#08x/%#08x", v, v), fmt.Sprintf("%#08x", v)
}

// rulesWriter renders one iptables-restore line at a time.
type rulesWriter struct{ b *bytes.Buffer }

func (w rulesWriter) line(words ...string) {
	for i, s := range words {
		if i > 0 {
			w.b.WriteByte(' ')
		}
		if i > 0 && (strings.ContainsAny(s, " \"") || s == "") {
			w.b.WriteString(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
		} else {
			w.b.WriteString(s)
		}
	}
	w.b.WriteByte('\n')
}

// writeRules renders the fixed ruleset for iptables-restore --noflush. It
// depends only on the configuration: which services exist is in the
// ipsets, so service changes never rewrite iptables.
func writeRules(b *bytes.Buffer, cfg *Config, randomFully bool) {
	w := rulesWriter{b}
	s := newSetNames(cfg.IPFamily)
	mark, value := masqMark(cfg.MasqueradeBit)
	set := func(name, flags string) []string { return []string{"-m", "set", "--match-set", name, flags} }
	cmt := func(c string) []string { return []string{"-m", "comment", "--comment", c} }
	rule := func(chain xtables.Chain, parts ...[]string) {
		words := []string{"-A", string(chain)}
		for _, p := range parts {
			words = append(words, p...)
		}
		w.line(words...)
	}
	jump := func(t xtables.Chain) []string { return []string{"-j", string(t)} }

	w.line("*nat")
	for _, c := range natChains {
		w.line(":" + string(c) + " - [0:0]")
	}
	rule(ChainServices, cmt("Kubernetes service lb portal"), set(s.lb, "dst,dst"), jump(ChainLoadBalancer))
	switch {
	case cfg.MasqueradeAll:
		rule(ChainServices, cmt("Kubernetes service cluster ip + port for masquerade purpose"), set(s.clusterIP, "dst,dst"), jump(ChainMarkMasq))
	case cfg.LocalDetector.Mode != proxy.LocalModeNone:
		rule(ChainServices, cmt("Kubernetes service cluster ip + port for masquerade purpose"), xtables.LocalMatch(cfg.LocalDetector, true), set(s.clusterIP, "dst,dst"), jump(ChainMarkMasq))
	}
	rule(ChainServices, cmt("Kubernetes service external ip + port for masquerade and filter purpose"), set(s.externalIP, "dst,dst"), jump(ChainMarkMasq))
	rule(ChainServices, cmt("Kubernetes service external ip + port for masquerade and filter purpose"), set(s.externalIP, "dst,dst"), jump("ACCEPT"))
	rule(ChainServices, cmt("Kubernetes service external ip + port with externalTrafficPolicy=local"), set(s.externalIPLocal, "dst,dst"), jump("ACCEPT"))
	rule(ChainServices, cmt("kubernetes service nodeports; NOTE: this must be the last rule in this chain"), []string{"-m", "addrtype", "--dst-type", "LOCAL"}, jump(ChainNodePort))
	rule(ChainServices, cmt("Kubernetes service cluster ip + port for masquerade purpose"), set(s.clusterIP, "dst,dst"), jump("ACCEPT"))
	rule(ChainServices, cmt("Kubernetes service lb portal"), set(s.lb, "dst,dst"), jump("ACCEPT"))

	rule(ChainLoadBalancer, cmt("Kubernetes service load balancer ip + port with externalTrafficPolicy=local"), set(s.lbLocal, "dst,dst"), jump("RETURN"))
	rule(ChainLoadBalancer, jump(ChainMarkMasq))

	for _, np := range []struct{ proto, local, all, flags string }{
		{"tcp", s.npLocalTCP, s.npTCP, "dst"},
		{"udp", s.npLocalUDP, s.npUDP, "dst"},
		{"sctp", s.npLocalSCTP, s.npSCTP, "dst,dst"},
	} {
		rule(ChainNodePort, []string{"-p", np.proto}, cmt("Kubernetes nodeport "+strings.ToUpper(np.proto)+" port with externalTrafficPolicy=local"), set(np.local, np.flags), jump("RETURN"))
		rule(ChainNodePort, []string{"-p", np.proto}, cmt("Kubernetes nodeport "+strings.ToUpper(np.proto)+" port for masquerade purpose"), set(np.all, np.flags), jump(ChainMarkMasq))
	}

	rule(ChainPostrouting, cmt("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"), set(s.loopBack, "dst,dst,src"), jump("MASQUERADE"))
	rule(ChainPostrouting, []string{"-m", "mark", "!", "--mark", mark}, jump("RETURN"))
	rule(ChainPostrouting, jump("MARK"), []string{"--xor-mark", value})
	masq := []string{"-j", "MASQUERADE"}
	if randomFully {
		masq = append(masq, "--random-fully")
	}
	rule(ChainPostrouting, cmt("kubernetes service traffic requiring SNAT"), masq)
	rule(ChainMarkMasq, jump("MARK"), []string{"--or-mark", value})
	w.line("COMMIT")

	w.line("*filter")
	for _, c := range filterChains {
		w.line(":" + string(c) + " - [0:0]")
	}
	rule(ChainForward, []string{"-m", "conntrack", "--ctstate", "INVALID"}, jump("DROP"))
	rule(ChainForward, cmt("kubernetes forwarding rules"), []string{"-m", "mark", "--mark", mark}, jump("ACCEPT"))
	rule(ChainForward, cmt("kubernetes forwarding conntrack rule"), []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}, jump("ACCEPT"))
	rule(ChainNodePort, cmt("Kubernetes health check node port"), set(s.healthCheck, "dst"), jump("ACCEPT"))
	rule(ChainProxyFirewall, cmt("Kubernetes service load balancer ip + port for load balancer with sourceRange"), set(s.lbFW, "dst,dst"), jump(ChainSourceRangesFirewl))
	rule(ChainSourceRangesFirewl, cmt("Kubernetes service load balancer ip + port + source cidr for packet filter purpose"), set(s.lbSourceCIDR, "dst,dst,src"), jump("RETURN"))
	rule(ChainSourceRangesFirewl, cmt("Kubernetes service load balancer ip + port + source IP for packet filter purpose"), set(s.lbSourceIP, "dst,dst,src"), jump("RETURN"))
	rule(ChainSourceRangesFirewl, cmt("Kubernetes service load balancer source ranges: drop the rest"), jump("DROP"))
	for _, n := range []string{s.lb, s.clusterIP, s.externalIP, s.externalIPLocal} {
		rule(ChainIPVSFilter, set(n, "dst,dst"), jump("RETURN"))
	}
	rule(ChainIPVSFilter, set(s.healthCheck, "dst"), jump("RETURN"))
	rule(ChainIPVSFilter, cmt("Kubernetes service IPs: reject other ports"), []string{"-m", "conntrack", "--ctstate", "NEW"}, set(s.ipvsIPs, "dst"), jump("REJECT"))
	w.line("COMMIT")
}
