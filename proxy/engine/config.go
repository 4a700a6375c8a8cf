package engine

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/conntrack"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// Defaults for the zero values of Common.
const (
	DefaultSyncPeriod         = 30 * time.Second
	DefaultMinSyncPeriod      = time.Second
	DefaultFullSyncPeriod     = time.Hour
	DefaultDriftCheckInterval = 2 * time.Second
)

// HealthServer is the proxier health (healthz) server: told when a sync is
// queued and when one completed. proxy/healthcheck's ProxyHealthServer
// satisfies it.
type HealthServer interface {
	QueuedUpdate(family v1.IPFamily)
	Updated(family v1.IPFamily)
}

// ServiceHealthServer serves the health-check node ports of
// externalTrafficPolicy: Local services. proxy/healthcheck's
// ServiceHealthServer (or its per-family view) satisfies it.
type ServiceHealthServer interface {
	SyncServices(newServices map[types.NamespacedName]uint16) error
	SyncEndpoints(newEndpoints map[types.NamespacedName]int) error
}

// Common is the part of every engine's Config that the engine base owns.
// Each engine's Config embeds it as the field Common, so one value can be
// built once and handed to any mode and family:
//
//	common := engine.Common{NodeName: "node-1", Metrics: m}
//	ipt, err := iptables.NewProxier(iptables.Config{Common: common, Netfilter: engine.Netfilter{MasqueradeBit: 14}}, ifs)
//
// and its fields read as the engine's own (cfg.NodeName). Every field has a
// documented zero value.
type Common struct {
	// IPFamily of the proxier. "" means the family of the interfaces the
	// engine is given where they have one, else IPv4.
	IPFamily v1.IPFamily
	// NodeName decides which endpoints are local. Required for Local
	// traffic policies to mean anything.
	NodeName string
	// NodeIPs are this node's addresses; the first of the proxier's family
	// is its node IP. Optional.
	NodeIPs []netip.Addr
	// ServiceProxyName: see proxy.ShouldSkipService. Empty: services
	// labelled service.kubernetes.io/service-proxy-name are skipped; set:
	// only services labelled with exactly this name are kept.
	ServiceProxyName string
	// EndpointFilter keeps only endpoints of this proxier's pod networks
	// (zero: every endpoint).
	EndpointFilter proxy.EndpointFilter

	// SyncPeriod: Run syncs at least this often, changed or not (0: 30s).
	// Such a periodic sync is partial: it writes only what changed, and
	// costs next to nothing when nothing did.
	SyncPeriod time.Duration
	// MinSyncPeriod: syncs start at least this far apart (0: 1s; negative:
	// no limit).
	MinSyncPeriod time.Duration
	// FullSyncPeriod: a full sync (every object recomputed and compared
	// with the node) happens at least this often (0: one hour, as
	// kube-proxy; negative: only at start, after failures, node label
	// changes and detected drift).
	FullSyncPeriod time.Duration
	// DriftCheckInterval: how often Run asks the engine whether the node
	// still holds what it wrote (a canary chain, say); a "no" makes the
	// next sync full and starts it at once (0: 2s; negative: never).
	// Engines without a drift check ignore it.
	DriftCheckInterval time.Duration

	// Logger; the zero value discards.
	Logger logr.Logger
	// Clock drives Run, the periods and the recorded times; nil is the
	// real clock. Tests pass k8s.io/utils/clock/testing.FakeClock.
	Clock clock.WithTicker
	// Metrics receives kube-proxy's sync metrics; nil disables them (the
	// handle is nil-safe).
	Metrics *metrics.Metrics
	// HealthServer is told when syncs are queued and done (healthz); nil
	// disables.
	HealthServer HealthServer
	// ServiceHealthServer serves health-check node ports; nil disables.
	ServiceHealthServer ServiceHealthServer
	// Conntrack deletes stale UDP conntrack entries after each successful
	// sync; nil cleans none. conntrack.New returns the netlink cleaner.
	Conntrack conntrack.Cleaner
	// OnSync, if set, is called after every sync attempt (the loop's and
	// explicit Sync calls alike), failed or not, from the syncing
	// goroutine, with no lock held. It is how an embedder sees sync errors
	// while Run keeps retrying; Stats gives the same for polling.
	OnSync func(SyncOutcome)
}

// WithDefaults returns c with zero values replaced by their defaults and
// validated. family is used when c.IPFamily is empty (pass "" for IPv4).
// Engines call it from their constructor; New calls it too.
func (c Common) WithDefaults(family v1.IPFamily) (Common, error) {
	if c.IPFamily == "" {
		c.IPFamily = family
	}
	if c.IPFamily == "" {
		c.IPFamily = v1.IPv4Protocol
	}
	if family != "" && c.IPFamily != family {
		return c, fmt.Errorf("IPFamily is %s but the interfaces given are %s", c.IPFamily, family)
	}
	if c.IPFamily != v1.IPv4Protocol && c.IPFamily != v1.IPv6Protocol {
		return c, fmt.Errorf("unknown IP family %q", c.IPFamily)
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	switch {
	case c.MinSyncPeriod == 0:
		c.MinSyncPeriod = DefaultMinSyncPeriod
	case c.MinSyncPeriod < 0:
		c.MinSyncPeriod = 0
	}
	if c.FullSyncPeriod == 0 {
		c.FullSyncPeriod = DefaultFullSyncPeriod
	}
	if c.DriftCheckInterval == 0 {
		c.DriftCheckInterval = DefaultDriftCheckInterval
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c, nil
}

// NodeIP is the first of NodeIPs in the proxier's family, or the zero Addr.
func (c *Common) NodeIP() netip.Addr {
	for _, ip := range c.NodeIPs {
		if ip = ip.Unmap(); ip.Is4() == (c.IPFamily == v1.IPv4Protocol) {
			return ip
		}
	}
	return netip.Addr{}
}
