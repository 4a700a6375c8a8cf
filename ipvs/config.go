package ipvs

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// Defaults for the zero values of Config.
const (
	DefaultSyncPeriod                = 30 * time.Second
	DefaultMinSyncPeriod             = time.Second
	DefaultMasqueradeBit             = 14
	DefaultGracefulTerminationPeriod = 15 * time.Minute
	// DummyDevice is the dummy link that holds every service address, so the
	// kernel sees them as local and hands their packets to IPVS. It is never
	// brought up and never used for routing.
	DummyDevice = "kube-ipvs0"
	// AnnotationScheduler, on a Service, picks its IPVS scheduler (one of
	// AllSchedulers); an unknown value is logged and the default is used.
	AnnotationScheduler = "ipvs.svcproxy.io/scheduler"
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

// Config configures a Proxier. Zero values are documented per field.
type Config struct {
	// IPFamily is the family this proxier serves (IPv4 when empty).
	IPFamily v1.IPFamily
	// NodeName decides which endpoints are local.
	NodeName string
	// NodeIPs are this node's primary IPs (informational; node ports are
	// served on NodePortAddresses).
	NodeIPs []netip.Addr
	// SyncPeriod: a full sync (reading the kernel back) at least this often
	// (0: DefaultSyncPeriod). MinSyncPeriod: syncs at least this far apart
	// (0: DefaultMinSyncPeriod; negative: no limit).
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit (0..31) of KUBE-MARK-MASQ (0: 14, as
	// kube-proxy). Use -1 to mean bit 0, as in iptables.Config.
	MasqueradeBit int
	// LocalDetector tells pod traffic apart (for masquerading cluster IP traffic from outside).
	LocalDetector LocalDetector
	// NodePortAddresses restricts node ports to node addresses inside these
	// prefixes; empty means every address of the family on every link but
	// kube-ipvs0 (loopback and link-local excluded, as in kube-proxy).
	NodePortAddresses []netip.Prefix
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
	// ServiceProxyName: only services labelled with it are handled (see proxy.LabelServiceProxyName).
	ServiceProxyName string
	// EndpointFilter keeps only endpoints of this proxier's pod networks.
	EndpointFilter proxy.EndpointFilter
	// Logger; the zero value discards.
	Logger logr.Logger
	// Metrics, nil for none.
	Metrics *metrics.Metrics
	// Clock, nil for the real clock (tests pass a fake one).
	Clock clock.WithTicker
	// HealthServer (the proxier's healthz, e.g. a proxy/healthcheck
	// ProxyHealthServer) is told when a change is queued and when a sync
	// succeeded; nil for none.
	HealthServer HealthServer
	// ServiceHealthServer (e.g. a proxy/healthcheck ServiceHealthServer)
	// gets the health-check node ports and local endpoint counts after
	// every sync; nil for none.
	ServiceHealthServer ServiceHealthServer
}

// HealthServer is the proxier health (healthz) server.
type HealthServer interface {
	QueuedUpdate(family v1.IPFamily)
	Updated(family v1.IPFamily)
}

// ServiceHealthServer serves the health-check node ports of
// externalTrafficPolicy Local services.
type ServiceHealthServer interface {
	// SyncServices gets every service's health-check node port.
	SyncServices(nodePorts map[types.NamespacedName]uint16) error
	// SyncEndpoints gets the number of ready local endpoints per service.
	SyncEndpoints(localEndpoints map[types.NamespacedName]int) error
}

// Interfaces are what the Proxier drives. Build them with New, NewIPSet,
// NewNetlink, NewSysctl, iptables' runner and conntrack's cleaner, or with
// the fakes of ipvstest.
type Interfaces struct {
	IPVS     Interface
	IPSet    IPSet
	Netlink  Netlink
	IPTables iptables.Runner
	Sysctl   Sysctl
	// Conntrack clears UDP flows to removed real servers; nil skips it.
	Conntrack conntrack.Cleaner
}

func (c *Config) setDefaults() error {
	if c.IPFamily == "" {
		c.IPFamily = v1.IPv4Protocol
	}
	if c.IPFamily != v1.IPv4Protocol && c.IPFamily != v1.IPv6Protocol {
		return fmt.Errorf("ipvs: IPFamily %q is neither IPv4 nor IPv6", c.IPFamily)
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	if c.MinSyncPeriod == 0 {
		c.MinSyncPeriod = DefaultMinSyncPeriod
	} else if c.MinSyncPeriod < 0 {
		c.MinSyncPeriod = 0
	}
	switch c.MasqueradeBit {
	case 0:
		c.MasqueradeBit = DefaultMasqueradeBit
	case -1:
		c.MasqueradeBit = 0
	}
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		return fmt.Errorf("ipvs: MasqueradeBit %d is not in 0..31", c.MasqueradeBit)
	}
	if c.Scheduler == "" {
		c.Scheduler = DefaultScheduler
	}
	if !validScheduler(c.Scheduler) {
		return fmt.Errorf("ipvs: unknown scheduler %q (want one of %v)", c.Scheduler, AllSchedulers)
	}
	if c.GracefulTerminationPeriod <= 0 {
		c.GracefulTerminationPeriod = DefaultGracefulTerminationPeriod
	}
	if err := c.LocalDetector.Validate(c.IPFamily); err != nil {
		return fmt.Errorf("ipvs: %w", err)
	}
	for _, p := range c.NodePortAddresses {
		if !p.IsValid() {
			return fmt.Errorf("ipvs: invalid node port address prefix")
		}
	}
	return nil
}

func validScheduler(s string) bool {
	for _, x := range AllSchedulers {
		if x == s {
			return true
		}
	}
	return false
}
