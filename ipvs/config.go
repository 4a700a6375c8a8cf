package ipvs

import (
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// Defaults for the zero values of Config.
const (
	DefaultGracefulTerminationPeriod = 15 * time.Minute
	// DummyDevice is the dummy link that holds every service address, so the
	// kernel sees them as local and hands their packets to IPVS. It is never
	// brought up and never used for routing.
	DummyDevice = "kube-ipvs0"
	// AnnotationScheduler, on a Service, picks its IPVS scheduler (one of
	// AllSchedulers); an unknown value is logged and the default is used.
	AnnotationScheduler = "ipvs.svcproxy.io/scheduler"
)

// Config configures a Proxier: the fields every engine shares
// (engine.Common: family, node, periods, logger, clock, metrics, health
// servers, conntrack cleaner, OnSync), the fields of the engines that
// write netfilter rules (engine.Netfilter: MasqueradeAll, MasqueradeBit,
// LocalDetector and NodePortAddresses, whose empty value means every
// address of the family on the node's links here), then the IPVS mode's
// own. Zero values are documented per field:
//
//	ipvs.Config{Common: engine.Common{NodeName: "node-1"}, Scheduler: "wlc"}
//
// Common.SyncPeriod syncs are partial (only what changed is written); a
// full sync, which reads the kernel back and repairs what differs, runs at
// start, after failures, every Common.FullSyncPeriod, and at once when the
// drift check finds our iptables rules or kube-ipvs0 addresses gone (every
// Common.DriftCheckInterval).
type Config struct {
	engine.Common
	engine.Netfilter

	// Scheduler is the default IPVS scheduler ("" is rr). A service can pick
	// its own with the AnnotationScheduler annotation.
	Scheduler string
	// ExcludeCIDRs: virtual servers and kube-ipvs0 addresses inside these are
	// never deleted (they belong to someone else).
	ExcludeCIDRs []netip.Prefix
	// ConnReuseMode, when set, is written to net/ipv4/vs/conn_reuse_mode.
	// kube-proxy writes 0 on kernels older than 5.9 (where 1 delays
	// connections that reuse a port by a second) and leaves newer ones alone.
	ConnReuseMode *int
	// StrictARP sets arp_ignore=1 and arp_announce=2 on all interfaces, so
	// the node does not answer ARP for service addresses (MetalLB L2).
	StrictARP bool
	// TCPTimeout, TCPFinTimeout, UDPTimeout set IPVS's connection timeouts (0: leave as is).
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	UDPTimeout    time.Duration
	// GracefulTerminationPeriod bounds how long a removed TCP/SCTP real
	// server stays at weight 0 waiting for its connections to end
	// (0: DefaultGracefulTerminationPeriod).
	GracefulTerminationPeriod time.Duration
}

// Interfaces are what the Proxier drives. Build them with ipvskernel.New,
// NewIPSet, NewNetlink, NewSysctl and an iptables runner, or take
// ipvstest.NewFakes(family).Interfaces(). The UDP conntrack cleaner is
// Config.Conntrack (engine.Common).
type Interfaces struct {
	IPVS     Interface
	IPSet    IPSet
	Netlink  Netlink
	IPTables xtables.Runner
	Sysctl   Sysctl
}

// withDefaults fills the zero values and validates; family is the iptables
// runner's.
func (c Config) withDefaults(family v1.IPFamily) (Config, error) {
	common, err := c.Common.WithDefaults(family)
	if err != nil {
		return c, fmt.Errorf("ipvs: %w", err)
	}
	c.Common = common
	nf, err := c.Netfilter.WithDefaults(c.IPFamily)
	if err != nil {
		return c, fmt.Errorf("ipvs: %w", err)
	}
	c.Netfilter = nf
	if c.Scheduler == "" {
		c.Scheduler = DefaultScheduler
	}
	if !validScheduler(c.Scheduler) {
		return c, fmt.Errorf("ipvs: unknown scheduler %q (want one of %v)", c.Scheduler, AllSchedulers)
	}
	if c.GracefulTerminationPeriod <= 0 {
		c.GracefulTerminationPeriod = DefaultGracefulTerminationPeriod
	}
	return c, nil
}

func validScheduler(s string) bool {
	for _, x := range AllSchedulers {
		if x == s {
			return true
		}
	}
	return false
}

// AllSchedulers are the IPVS schedulers the proxier accepts.
var AllSchedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}

// DefaultScheduler is used when Config.Scheduler is empty.
const DefaultScheduler = "rr"
