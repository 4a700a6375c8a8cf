package iptables

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// Defaults for the zero values of Config.
const (
	DefaultSyncPeriod    = 30 * time.Second
	DefaultMinSyncPeriod = time.Second
	DefaultMasqueradeBit = 14
)

// Local-traffic detection is shared with the other engines; see
// proxy.LocalDetector.
type (
	LocalMode     = proxy.LocalMode
	LocalDetector = proxy.LocalDetector
)

// The local-traffic detection modes (proxy.LocalMode).
const (
	LocalModeNone                = proxy.LocalModeNone
	LocalModeClusterCIDR         = proxy.LocalModeClusterCIDR
	LocalModeNodeCIDR            = proxy.LocalModeNodeCIDR
	LocalModeBridgeInterface     = proxy.LocalModeBridgeInterface
	LocalModeInterfaceNamePrefix = proxy.LocalModeInterfaceNamePrefix
)

// HealthServer is the proxier health (healthz) server, told when a sync is
// queued and when one completed. proxy/healthcheck's server satisfies it.
type HealthServer interface {
	QueuedUpdate(family v1.IPFamily)
	Updated(family v1.IPFamily)
}

// ServiceHealthServer serves the health-check node ports of eTP Local
// services. proxy/healthcheck's server satisfies it.
type ServiceHealthServer interface {
	SyncServices(newServices map[types.NamespacedName]uint16) error
	SyncEndpoints(newEndpoints map[types.NamespacedName]int) error
}

// Config configures a Proxier. The zero value of each field is documented.
type Config struct {
	// IPFamily of this proxier; "" means the Runner's family.
	IPFamily v1.IPFamily
	// NodeName decides which endpoints are local. Required for Local
	// traffic policies to mean anything.
	NodeName string
	// NodeIPs are this node's addresses; the first of the proxier's family
	// is the node IP (used to let the node through loadBalancerSourceRanges
	// that contain it). Optional.
	NodeIPs []netip.Addr
	// SyncPeriod: a full sync happens at least this often (0: 30s).
	SyncPeriod time.Duration
	// MinSyncPeriod: syncs are at least this far apart (0: 1s; negative: no limit).
	MinSyncPeriod time.Duration
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit (0..31) for packets to masquerade
	// (0: 14, as kube-proxy). Use -1 to mean bit 0.
	MasqueradeBit int
	// LocalDetector says which traffic comes from local pods (zero: none).
	LocalDetector LocalDetector
	// NodePortAddresses restricts node ports to the local addresses inside
	// these CIDRs (other families are ignored). Empty, or a CIDR covering
	// the whole family, means every local address of the family (matched
	// with "-m addrtype --dst-type LOCAL"). Loopback addresses never serve
	// node ports (kube-proxy's route_localnet is not set by this engine).
	NodePortAddresses []netip.Prefix
	// LocalAddresses lists this node's addresses for NodePortAddresses; nil
	// means the addresses of the network interfaces (net.InterfaceAddrs).
	LocalAddresses func() ([]netip.Addr, error)
	// ServiceProxyName: see changetracker.Config.
	ServiceProxyName string
	// EndpointFilter: see changetracker.Config.
	EndpointFilter proxy.EndpointFilter
	// Logger; the zero value discards.
	Logger logr.Logger
	// Clock drives Run and the periodic full sync; nil is the real clock.
	Clock clock.WithTicker
	// Metrics; nil disables (the handle is nil-safe).
	Metrics *metrics.Metrics
	// HealthServer and ServiceHealthServer; nil disables each.
	HealthServer        HealthServer
	ServiceHealthServer ServiceHealthServer
	// Conntrack cleans stale UDP conntrack entries after a sync; nil means
	// none is cleaned. NewConntrackCleaner returns the netlink one.
	Conntrack ConntrackCleaner
}

// withDefaults fills zero values and validates.
func (c Config) withDefaults(family v1.IPFamily) (Config, error) {
	if c.IPFamily == "" {
		c.IPFamily = family
	}
	if c.IPFamily != family {
		return c, fmt.Errorf("iptables: Config.IPFamily %s but the runner is %s", c.IPFamily, family)
	}
	if c.IPFamily != v1.IPv4Protocol && c.IPFamily != v1.IPv6Protocol {
		return c, fmt.Errorf("iptables: unknown IP family %q", c.IPFamily)
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	if c.MinSyncPeriod == 0 {
		c.MinSyncPeriod = DefaultMinSyncPeriod
	} else if c.MinSyncPeriod < 0 {
		c.MinSyncPeriod = 0
	}
	switch {
	case c.MasqueradeBit == 0:
		c.MasqueradeBit = DefaultMasqueradeBit
	case c.MasqueradeBit == -1:
		c.MasqueradeBit = 0
	case c.MasqueradeBit < 0 || c.MasqueradeBit > 31:
		return c, fmt.Errorf("iptables: MasqueradeBit %d out of range 0..31", c.MasqueradeBit)
	}
	if err := c.LocalDetector.Validate(c.IPFamily); err != nil {
		return c, fmt.Errorf("iptables: %w", err)
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c, nil
}

// nodeIP is the first NodeIP of the proxier's family, or the zero Addr.
func (c *Config) nodeIP() netip.Addr {
	for _, ip := range c.NodeIPs {
		if ip.Unmap().Is4() == (c.IPFamily == v1.IPv4Protocol) {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}
