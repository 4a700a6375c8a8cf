package ipvs

import (
	"strings"

	v1 "k8s.io/api/core/v1"
)

// The ipsets of the IPVS proxier, with kube-proxy's names (the IPv6
// proxier's are spelled "KUBE-6-...", as upstream, so both families coexist).
const (
	SetLoopBack               = "KUBE-LOOP-BACK"
	SetClusterIP              = "KUBE-CLUSTER-IP"
	SetExternalIP             = "KUBE-EXTERNAL-IP"
	SetExternalIPLocal        = "KUBE-EXTERNAL-IP-LOCAL"
	SetLoadBalancer           = "KUBE-LOAD-BALANCER"
	SetLoadBalancerLocal      = "KUBE-LOAD-BALANCER-LOCAL"
	SetLoadBalancerFW         = "KUBE-LOAD-BALANCER-FW"
	SetLoadBalancerSourceIP   = "KUBE-LOAD-BALANCER-SOURCE-IP"
	SetLoadBalancerSourceCIDR = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
	SetNodePortTCP            = "KUBE-NODE-PORT-TCP"
	SetNodePortLocalTCP       = "KUBE-NODE-PORT-LOCAL-TCP"
	SetNodePortUDP            = "KUBE-NODE-PORT-UDP"
	SetNodePortLocalUDP       = "KUBE-NODE-PORT-LOCAL-UDP"
	SetNodePortSCTP           = "KUBE-NODE-PORT-SCTP-HASH"
	SetNodePortLocalSCTP      = "KUBE-NODE-PORT-LOCAL-SCTP-HASH"
	SetHealthCheckNodePort    = "KUBE-HEALTH-CHECK-NODE-PORT"
	SetIPVSIPs                = "KUBE-IPVS-IPS"
)

// setDef is one ipset the proxier owns.
type setDef struct {
	name    string
	typ     SetType
	comment string
}

var setDefs = []setDef{
	{SetLoopBack, HashIPPortIP, "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"},
	{SetClusterIP, HashIPPort, "Kubernetes service cluster ip + port for masquerade purpose"},
	{SetExternalIP, HashIPPort, "Kubernetes service external ip + port for masquerade and filter purpose"},
	{SetExternalIPLocal, HashIPPort, "Kubernetes service external ip + port with externalTrafficPolicy=local"},
	{SetLoadBalancer, HashIPPort, "Kubernetes service lb portal"},
	{SetLoadBalancerLocal, HashIPPort, "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"},
	{SetLoadBalancerFW, HashIPPort, "Kubernetes service load balancer ip + port for load balancer with sourceRange"},
	{SetLoadBalancerSourceIP, HashIPPortIP, "Kubernetes service load balancer ip + port + source IP for packet filter purpose"},
	{SetLoadBalancerSourceCIDR, HashIPPortNet, "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"},
	{SetNodePortTCP, BitmapPort, "Kubernetes nodeport TCP port for masquerade purpose"},
	{SetNodePortLocalTCP, BitmapPort, "Kubernetes nodeport TCP port with externalTrafficPolicy=local"},
	{SetNodePortUDP, BitmapPort, "Kubernetes nodeport UDP port for masquerade purpose"},
	{SetNodePortLocalUDP, BitmapPort, "Kubernetes nodeport UDP port with externalTrafficPolicy=local"},
	{SetNodePortSCTP, HashIPPort, "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'"},
	{SetNodePortLocalSCTP, HashIPPort, "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'"},
	{SetHealthCheckNodePort, BitmapPort, "Kubernetes health check node port"},
	{SetIPVSIPs, HashIP, "Kubernetes service IPs bound to kube-ipvs0, for filtering other ports"},
}

// maxSetName is the kernel's limit on ipset names (IPSET_MAXNAMELEN - 1).
const maxSetName = 31

// SetName returns the family's name of one of the Set* names. IPv6 names
// that would exceed the kernel's 31 characters spell LOAD-BALANCER as LB
// and NODE-PORT as NP (KUBE-6-LB-SOURCE-CIDR, KUBE-6-NP-LOCAL-SCTP-HASH).
func SetName(family v1.IPFamily, base string) string {
	if family != v1.IPv6Protocol {
		return base
	}
	n := strings.Replace(base, "KUBE-", "KUBE-6-", 1)
	if len(n) > maxSetName {
		n = strings.NewReplacer("LOAD-BALANCER", "LB", "NODE-PORT", "NP").Replace(n)
	}
	return n
}

// Sets returns the ipsets the proxier of family creates, in a fixed order.
func Sets(family v1.IPFamily) []Set {
	out := make([]Set, 0, len(setDefs))
	for _, d := range setDefs {
		out = append(out, Set{Name: SetName(family, d.name), Type: d.typ, Family: family, Comment: d.comment})
	}
	return out
}
