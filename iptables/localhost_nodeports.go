package iptables

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/sysctl"
)

// Localhost node ports (Config.LocalhostNodePorts), as kube-proxy's
// iptables mode serves them: IPv4 only, and only when NodePortAddresses
// let loopback addresses serve node ports. The kernel routes a packet
// with a 127.0.0.0/8 source or destination off the loopback device only
// with net.ipv4.conf.all.route_localnet=1, which the engine then sets;
// since that also lets other hosts reach services bound to 127.0.0.1,
// filter KUBE-FIREWALL drops such packets unless conntrack saw them
// DNAT'd (kube-proxy's and the kubelet's "block incoming localnet
// connections" rule, issue kubernetes#90259).

// SysctlRouteLocalnet is the sysctl the engine sets to 1 when it serves
// node ports on 127.0.0.0/8.
const SysctlRouteLocalnet = "net/ipv4/conf/all/route_localnet"

// ChainKubeFirewall is the filter chain, shared with the kubelet, that
// holds the "block incoming localnet connections" rule.
const ChainKubeFirewall xtables.Chain = "KUBE-FIREWALL"

// Sysctl reads and writes integer kernel settings named relative to
// /proc/sys ("net/ipv4/conf/all/route_localnet"). Network settings are
// per network namespace.
type Sysctl = sysctl.Interface

// NewSysctl returns the /proc/sys of the calling thread's network
// namespace (on systems without /proc/sys every call fails).
func NewSysctl() Sysctl { return sysctl.New() }

// ErrRouteLocalnet is wrapped by the error of a full sync that could not
// set route_localnet (a read-only /proc/sys, as in an unprivileged
// container's network namespace). The sync fails and is retried; turn
// Config.LocalhostNodePorts off, or leave loopback out of
// NodePortAddresses, to run without it.
var ErrRouteLocalnet = errors.New("iptables: cannot set " + SysctlRouteLocalnet + " for localhost node ports")

// ServesLocalhostNodePorts reports whether a Proxier with this Config
// serves node ports on 127.0.0.0/8 (and so sets route_localnet):
// LocalhostNodePorts on, IPFamily IPv4 (or unset), and NodePortAddresses
// empty or with an IPv4 CIDR holding a loopback address (kube-proxy's
// ContainsIPv4Loopback: a CIDR containing 127.0.0.0, or one whose
// address is loopback). For a tool that prepares a node before the proxy
// runs, as kube-proxy's --init-only does.
func (c Config) ServesLocalhostNodePorts() bool { return servesLocalhostNodePorts(&c) }

func servesLocalhostNodePorts(cfg *Config) bool {
	if !cfg.LocalhostNodePorts || cfg.IPFamily == v1.IPv6Protocol {
		return false
	}
	if len(cfg.NodePortAddresses) == 0 {
		return true
	}
	loop := netip.AddrFrom4([4]byte{127, 0, 0, 0})
	for _, c := range cfg.NodePortAddresses {
		c = c.Masked()
		if c.Addr().Is4() && (c.Contains(loop) || c.Addr().IsLoopback()) {
			return true
		}
	}
	return false
}

// noteLocalhostNodePorts logs, once at construction, what kube-proxy
// logs: that route_localnet will be set, or that loopback addresses
// listed in NodePortAddresses will not serve node ports.
func noteLocalhostNodePorts(cfg *Config, serves bool, log logr.Logger) {
	if serves {
		log.Info("Setting route_localnet=1 to allow node ports on localhost; to change this either turn off localhost node ports (--iptables-localhost-nodeports=false) or set node port addresses (--nodeport-addresses) that leave out loopback")
		return
	}
	for _, c := range cfg.NodePortAddresses {
		if c.Addr().Is4() != (cfg.IPFamily == v1.IPv4Protocol) || !c.Addr().IsLoopback() {
			continue
		}
		if cfg.IPFamily == v1.IPv6Protocol {
			log.Error(nil, "Node port addresses include localhost, but node ports are never served on IPv6 loopback", "cidr", c.String())
		} else {
			log.Error(nil, "Node port addresses include localhost, but localhost node ports are turned off", "cidr", c.String())
		}
	}
}

// ensureRouteLocalnet sets route_localnet to 1 unless it already is.
func ensureRouteLocalnet(s Sysctl) error {
	if v, err := s.Get(SysctlRouteLocalnet); err == nil && v == 1 {
		return nil
	}
	if err := s.Set(SysctlRouteLocalnet, 1); err != nil {
		return fmt.Errorf("%w: %w", ErrRouteLocalnet, err)
	}
	return nil
}

// localnetJumpRules hook KUBE-FIREWALL into filter INPUT and OUTPUT,
// without a comment, as the kubelet and kube-proxy do. Cleanup leaves
// them (and the chain) alone: they are the kubelet's too.
var localnetJumpRules = []xtables.JumpRule{
	{Table: xtables.TableFilter, From: xtables.ChainInput, To: ChainKubeFirewall},
	{Table: xtables.TableFilter, From: xtables.ChainOutput, To: ChainKubeFirewall},
}

// localnetTailExclusion is what the "match every local address" node-port
// tail rule leaves out: IPv6 loopback always, IPv4 loopback unless
// localhost node ports are served.
func localnetTailExclusion(ipv6, localhost bool) string {
	switch {
	case ipv6:
		return " ! -d ::1/128"
	case !localhost:
		return " ! -d 127.0.0.0/8"
	}
	return ""
}

// writeLocalnetFilterRules declares (so flushes) KUBE-FIREWALL and writes
// its one rule when localhost node ports are served.
func writeLocalnetFilterRules(w *lineWriter, env *planEnv) {
	if !env.localhostNodePorts {
		return
	}
	w.chainLine(ChainKubeFirewall)
	w.rule(ChainKubeFirewall).comment("block incoming localnet connections").
		w("-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT").jump("DROP")
}

// jumpRules are the jump rules a full sync ensures: kube-proxy's, and
// KUBE-FIREWALL's when localhost node ports are served.
func (p *Proxier) jumpRules() []xtables.JumpRule {
	if !p.r.env.localhostNodePorts {
		return jumpRules
	}
	return append(slices.Clip(jumpRules), localnetJumpRules...)
}
