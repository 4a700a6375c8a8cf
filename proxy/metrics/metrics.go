package metrics

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// Subsystem is the prefix of every metric name, as in kube-proxy.
const Subsystem = "kubeproxy"

// Label values of kubeproxy_sync_proxy_rules_no_local_endpoints_total.
const (
	TrafficPolicyInternal = "internal"
	TrafficPolicyExternal = "external"
)

// Iptables table label values, as kube-proxy reports them.
const (
	TableNAT    = "nat"
	TableFilter = "filter"
)

// syncBuckets are kube-proxy's sync latency buckets: 1ms doubling 15 times.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// networkProgrammingBuckets are kube-proxy's: 0.25s, 0.5s, 1..59s by 1s,
// 60..115s by 5s, 120..300s by 30s.
var networkProgrammingBuckets = func() []float64 {
	var b []float64
	b = append(b, prometheus.LinearBuckets(0.25, 0.25, 2)...)
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	b = append(b, prometheus.LinearBuckets(120, 30, 7)...)
	return b
}()

// alpha prefixes a help text the way k8s.io/component-base does for ALPHA
// metrics, so that the exposition matches kube-proxy's byte for byte.
func alpha(help string) string { return "[ALPHA] " + help }

// Metrics holds one proxy's Prometheus collectors. Create it with New,
// register it once with Register, and hand the same *Metrics to every
// engine of the process (the IPv4 and IPv6 engines of a dual-stack proxy
// share it; the ip_family label tells them apart).
//
// Every method is safe for concurrent use and is a no-op on a nil *Metrics,
// so engines can hold a nil one when the embedder wants no metrics.
type Metrics struct {
	SyncProxyRulesLatency             *prometheus.HistogramVec
	SyncFullProxyRulesLatency         *prometheus.HistogramVec
	SyncPartialProxyRulesLatency      *prometheus.HistogramVec
	SyncProxyRulesLastTimestamp       *prometheus.GaugeVec
	SyncProxyRulesLastQueuedTimestamp *prometheus.GaugeVec
	NetworkProgrammingLatency         *prometheus.HistogramVec

	EndpointChangesPending prometheus.Gauge
	EndpointChangesTotal   prometheus.Counter
	ServiceChangesPending  prometheus.Gauge
	ServiceChangesTotal    prometheus.Counter

	IPTablesRestoreFailuresTotal        *prometheus.CounterVec
	IPTablesPartialRestoreFailuresTotal *prometheus.CounterVec
	IPTablesRulesTotal                  *prometheus.GaugeVec
	IPTablesRulesLastSync               *prometheus.GaugeVec

	SyncProxyRulesNoLocalEndpointsTotal *prometheus.GaugeVec

	ProxyHealthzTotal *prometheus.CounterVec
	ProxyLivezTotal   *prometheus.CounterVec

	ReconcileConntrackFlowsLatency             *prometheus.HistogramVec
	ReconcileConntrackFlowsDeletedEntriesTotal *prometheus.CounterVec

	ServiceHealthCheckListenFailuresTotal prometheus.Counter

	// The Windows engine's load-balancer failures, as kube-proxy v1.37
	// (labels ip_family, lb_type, error; see IncWinKernelLBFailure).
	WinKernelLBCreateFailuresTotal *prometheus.CounterVec
	WinKernelLBUpdateFailuresTotal *prometheus.CounterVec
	WinKernelLBDeleteFailuresTotal *prometheus.CounterVec
	// kube-proxy v1.37's localhost node-port proxy of the nftables mode
	// (its KubeProxyNFTablesLocalhostNodePorts gate).
	NFTablesLocalhostNodePortListeners                     *prometheus.GaugeVec
	NFTablesLocalhostNodePortListenerCreationFailuresTotal *prometheus.CounterVec
	// The fast writers (svcproxy's own; writer is WriterLegacyInProcess
	// or WriterNFTablesNetlink).
	FastWriterActive            *prometheus.GaugeVec
	FastWriterHandedToToolTotal *prometheus.CounterVec
	FastWriterSwitchedOffTotal  *prometheus.CounterVec
	// FastWriterBufferBytes is the memory the nftables netlink writer
	// encodes its batches in, mapped outside the Go heap (so not in the
	// go_memstats figures): state "resident" (pages in memory now) or
	// "mapped" (address space).
	FastWriterBufferBytes *prometheus.GaugeVec
}

// The writer label values of the fast-writer metrics.
const (
	// WriterLegacyInProcess: iptables-legacy tables written from the
	// process instead of by iptables-legacy-restore.
	WriterLegacyInProcess = "iptables-legacy-in-process"
	// WriterNFTablesNetlink: nftables transactions sent over netlink
	// instead of through nft.
	WriterNFTablesNetlink = "nftables-netlink"
)

// New returns a fresh set of collectors, not yet registered anywhere.
func New() *Metrics {
	family := []string{"ip_family"}
	return &Metrics{
		SyncProxyRulesLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_duration_seconds",
			Help:      alpha("SyncProxyRules latency in seconds"),
			Buckets:   syncBuckets,
		}, family),
		SyncFullProxyRulesLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem,
			Name:      "sync_full_proxy_rules_duration_seconds",
			Help:      alpha("SyncProxyRules latency in seconds for full resyncs"),
			Buckets:   syncBuckets,
		}, family),
		SyncPartialProxyRulesLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem,
			Name:      "sync_partial_proxy_rules_duration_seconds",
			Help:      alpha("SyncProxyRules latency in seconds for partial resyncs"),
			Buckets:   syncBuckets,
		}, family),
		SyncProxyRulesLastTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_last_timestamp_seconds",
			Help:      alpha("The last time proxy rules were successfully synced"),
		}, family),
		SyncProxyRulesLastQueuedTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_last_queued_timestamp_seconds",
			Help:      alpha("The last time a sync of proxy rules was queued"),
		}, family),
		NetworkProgrammingLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem,
			Name:      "network_programming_duration_seconds",
			Help:      alpha("In Cluster Network Programming Latency in seconds"),
			Buckets:   networkProgrammingBuckets,
		}, family),
		EndpointChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_endpoint_changes_pending",
			Help:      alpha("Pending proxy rules Endpoint changes"),
		}),
		EndpointChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_endpoint_changes_total",
			Help:      alpha("Cumulative proxy rules Endpoint changes"),
		}),
		ServiceChangesPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_service_changes_pending",
			Help:      alpha("Pending proxy rules Service changes"),
		}),
		ServiceChangesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_service_changes_total",
			Help:      alpha("Cumulative proxy rules Service changes"),
		}),
		IPTablesRestoreFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_iptables_restore_failures_total",
			Help:      alpha("Cumulative proxy iptables restore failures"),
		}, family),
		IPTablesPartialRestoreFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_iptables_partial_restore_failures_total",
			Help:      alpha("Cumulative proxy iptables partial restore failures"),
		}, family),
		IPTablesRulesTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_iptables_total",
			Help:      alpha("Total number of iptables rules owned by kube-proxy"),
		}, []string{"table", "ip_family"}),
		IPTablesRulesLastSync: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_iptables_last",
			Help:      alpha("Number of iptables rules written by kube-proxy in last sync"),
		}, []string{"table", "ip_family"}),
		SyncProxyRulesNoLocalEndpointsTotal: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_no_local_endpoints_total",
			Help:      alpha("Number of services with a Local traffic policy and no endpoints"),
		}, []string{"traffic_policy", "ip_family"}),
		ProxyHealthzTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "proxy_healthz_total",
			Help:      alpha("Cumulative proxy healthz HTTP status"),
		}, []string{"code"}),
		ProxyLivezTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "proxy_livez_total",
			Help:      alpha("Cumulative proxy livez HTTP status"),
		}, []string{"code"}),
		ReconcileConntrackFlowsLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: Subsystem,
			Name:      "conntrack_reconciler_sync_duration_seconds",
			Help:      alpha("ReconcileConntrackFlowsLatency latency in seconds"),
			Buckets:   syncBuckets,
		}, family),
		ReconcileConntrackFlowsDeletedEntriesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "conntrack_reconciler_deleted_entries_total",
			Help:      alpha("Cumulative conntrack flows deleted by conntrack reconciler"),
		}, family),
		// Not in kube-proxy, which only logs (and sends an event) when a
		// health-check node port cannot be opened.
		ServiceHealthCheckListenFailuresTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "service_healthcheck_listen_failures_total",
			Help:      "Cumulative failures to open a service health-check node port",
		}),
		WinKernelLBCreateFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_winkernel_lb_create_failures_total",
			Help:      alpha("Cumulative proxy winkernel lb create failures"),
		}, winKernelLBLabels),
		WinKernelLBUpdateFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_winkernel_lb_update_failures_total",
			Help:      alpha("Cumulative proxy winkernel lb update failures"),
		}, winKernelLBLabels),
		WinKernelLBDeleteFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "sync_proxy_rules_winkernel_lb_delete_failures_total",
			Help:      alpha("Cumulative proxy winkernel lb delete failures"),
		}, winKernelLBLabels),
		NFTablesLocalhostNodePortListeners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "nftables_localhost_nodeport_listeners",
			Help:      alpha("Number of active localhost NodePort userspace proxy listeners."),
		}, family),
		NFTablesLocalhostNodePortListenerCreationFailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "nftables_localhost_nodeport_listener_creation_failures_total",
			Help:      alpha("Number of localhost NodePort userspace proxy listener creation failures."),
		}, family),
		// Not in kube-proxy, which has no writer of its own.
		FastWriterActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "fast_writer_active",
			Help:      "1 while a writer that bypasses the standard tool (iptables-legacy tables written in process, nftables over netlink) writes, 0 while the tool does",
		}, []string{"ip_family", "writer"}),
		FastWriterHandedToToolTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "fast_writer_handed_to_tool_total",
			Help:      "Inputs a fast writer left to the standard tool, by reason (unsupported, refused)",
		}, []string{"ip_family", "writer", "reason"}),
		FastWriterSwitchedOffTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: Subsystem,
			Name:      "fast_writer_switched_off_total",
			Help:      "Fast writers switched off for the rest of the process, by reason (refusals the tool took, self-check)",
		}, []string{"ip_family", "writer", "reason"}),
		FastWriterBufferBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: Subsystem,
			Name:      "fast_writer_buffer_bytes",
			Help:      "Bytes of the buffers a fast writer encodes into outside the Go heap, by state (resident, mapped)",
		}, []string{"ip_family", "writer", "state"}),
	}
}

var winKernelLBLabels = []string{"ip_family", "lb_type", "error"}

// SetFastWriterActive records whether writer is the one writing.
func (m *Metrics) SetFastWriterActive(f v1.IPFamily, writer string, active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.FastWriterActive.WithLabelValues(family(f), writer).Set(v)
}

// IncFastWriterHandedToTool counts an input writer left to the tool.
func (m *Metrics) IncFastWriterHandedToTool(f v1.IPFamily, writer, reason string) {
	if m == nil {
		return
	}
	m.FastWriterHandedToToolTotal.WithLabelValues(family(f), writer, reason).Inc()
}

// IncFastWriterSwitchedOff counts writer switched off (and sets it
// inactive).
func (m *Metrics) IncFastWriterSwitchedOff(f v1.IPFamily, writer, reason string) {
	if m == nil {
		return
	}
	m.FastWriterSwitchedOffTotal.WithLabelValues(family(f), writer, reason).Inc()
	m.FastWriterActive.WithLabelValues(family(f), writer).Set(0)
}

// SetFastWriterBuffers records the bytes of writer's buffers outside the
// Go heap: resident now, and mapped.
func (m *Metrics) SetFastWriterBuffers(f v1.IPFamily, writer string, resident, mapped int64) {
	if m == nil {
		return
	}
	m.FastWriterBufferBytes.WithLabelValues(family(f), writer, "resident").Set(float64(resident))
	m.FastWriterBufferBytes.WithLabelValues(family(f), writer, "mapped").Set(float64(mapped))
}

// collectors lists every collector, in registration order.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.SyncProxyRulesLatency,
		m.SyncFullProxyRulesLatency,
		m.SyncPartialProxyRulesLatency,
		m.SyncProxyRulesLastTimestamp,
		m.SyncProxyRulesLastQueuedTimestamp,
		m.NetworkProgrammingLatency,
		m.EndpointChangesPending,
		m.EndpointChangesTotal,
		m.ServiceChangesPending,
		m.ServiceChangesTotal,
		m.IPTablesRestoreFailuresTotal,
		m.IPTablesPartialRestoreFailuresTotal,
		m.IPTablesRulesTotal,
		m.IPTablesRulesLastSync,
		m.SyncProxyRulesNoLocalEndpointsTotal,
		m.ProxyHealthzTotal,
		m.ProxyLivezTotal,
		m.ReconcileConntrackFlowsLatency,
		m.ReconcileConntrackFlowsDeletedEntriesTotal,
		m.ServiceHealthCheckListenFailuresTotal,
		m.WinKernelLBCreateFailuresTotal,
		m.WinKernelLBUpdateFailuresTotal,
		m.WinKernelLBDeleteFailuresTotal,
		m.NFTablesLocalhostNodePortListeners,
		m.NFTablesLocalhostNodePortListenerCreationFailuresTotal,
		m.FastWriterActive,
		m.FastWriterHandedToToolTotal,
		m.FastWriterSwitchedOffTotal,
		m.FastWriterBufferBytes,
	}
}

// Register registers every collector with r. It tries all of them and
// returns the joined errors (each a prometheus.AlreadyRegisteredError when
// a collector of the same name is already there), so registering twice
// fails cleanly. Registering a nil *Metrics does nothing.
func (m *Metrics) Register(r prometheus.Registerer) error {
	if m == nil {
		return nil
	}
	if r == nil {
		return errors.New("metrics: nil Registerer")
	}
	var errs []error
	for _, c := range m.collectors() {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func family(f v1.IPFamily) string { return string(f) }

// ObserveSync records the duration of one sync of any kind
// (kubeproxy_sync_proxy_rules_duration_seconds).
func (m *Metrics) ObserveSync(f v1.IPFamily, d time.Duration) {
	if m == nil {
		return
	}
	m.SyncProxyRulesLatency.WithLabelValues(family(f)).Observe(d.Seconds())
}

// ObserveFullSync records the duration of a full sync
// (kubeproxy_sync_full_proxy_rules_duration_seconds). Engines that know
// full from partial call it in addition to ObserveSync.
func (m *Metrics) ObserveFullSync(f v1.IPFamily, d time.Duration) {
	if m == nil {
		return
	}
	m.SyncFullProxyRulesLatency.WithLabelValues(family(f)).Observe(d.Seconds())
}

// ObservePartialSync records the duration of a partial sync
// (kubeproxy_sync_partial_proxy_rules_duration_seconds).
func (m *Metrics) ObservePartialSync(f v1.IPFamily, d time.Duration) {
	if m == nil {
		return
	}
	m.SyncPartialProxyRulesLatency.WithLabelValues(family(f)).Observe(d.Seconds())
}

// SetLastSync records when the rules were last synced successfully
// (kubeproxy_sync_proxy_rules_last_timestamp_seconds).
func (m *Metrics) SetLastSync(f v1.IPFamily, t time.Time) {
	if m == nil {
		return
	}
	m.SyncProxyRulesLastTimestamp.WithLabelValues(family(f)).Set(unixSeconds(t))
}

// SetLastQueued records when a sync was last requested
// (kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds).
func (m *Metrics) SetLastQueued(f v1.IPFamily, t time.Time) {
	if m == nil {
		return
	}
	m.SyncProxyRulesLastQueuedTimestamp.WithLabelValues(family(f)).Set(unixSeconds(t))
}

// ObserveNetworkProgramming records the time from an object's change
// (its endpoints.kubernetes.io/last-change-trigger-time) to the sync that
// programmed it (kubeproxy_network_programming_duration_seconds). Negative
// durations, from clock skew, are dropped.
func (m *Metrics) ObserveNetworkProgramming(f v1.IPFamily, d time.Duration) {
	if m == nil || d < 0 {
		return
	}
	m.NetworkProgrammingLatency.WithLabelValues(family(f)).Observe(d.Seconds())
}

// SetEndpointChangesPending sets kubeproxy_sync_proxy_rules_endpoint_changes_pending.
func (m *Metrics) SetEndpointChangesPending(n int) {
	if m == nil {
		return
	}
	m.EndpointChangesPending.Set(float64(n))
}

// IncEndpointChanges counts one recorded endpoint change
// (kubeproxy_sync_proxy_rules_endpoint_changes_total).
func (m *Metrics) IncEndpointChanges() {
	if m == nil {
		return
	}
	m.EndpointChangesTotal.Inc()
}

// SetServiceChangesPending sets kubeproxy_sync_proxy_rules_service_changes_pending.
func (m *Metrics) SetServiceChangesPending(n int) {
	if m == nil {
		return
	}
	m.ServiceChangesPending.Set(float64(n))
}

// IncServiceChanges counts one recorded service change
// (kubeproxy_sync_proxy_rules_service_changes_total).
func (m *Metrics) IncServiceChanges() {
	if m == nil {
		return
	}
	m.ServiceChangesTotal.Inc()
}

// IncIPTablesRestoreFailures counts a failed iptables-restore
// (kubeproxy_sync_proxy_rules_iptables_restore_failures_total).
func (m *Metrics) IncIPTablesRestoreFailures(f v1.IPFamily) {
	if m == nil {
		return
	}
	m.IPTablesRestoreFailuresTotal.WithLabelValues(family(f)).Inc()
}

// IncIPTablesPartialRestoreFailures counts a failed partial restore that
// fell back to a full one
// (kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total).
func (m *Metrics) IncIPTablesPartialRestoreFailures(f v1.IPFamily) {
	if m == nil {
		return
	}
	m.IPTablesPartialRestoreFailuresTotal.WithLabelValues(family(f)).Inc()
}

// SetIPTablesRules sets the number of rules the proxy owns in table
// (kubeproxy_sync_proxy_rules_iptables_total{table}).
func (m *Metrics) SetIPTablesRules(f v1.IPFamily, table string, n int) {
	if m == nil {
		return
	}
	m.IPTablesRulesTotal.WithLabelValues(table, family(f)).Set(float64(n))
}

// SetIPTablesRulesLastSync sets the number of rules written to table in the
// last sync (kubeproxy_sync_proxy_rules_iptables_last{table}).
func (m *Metrics) SetIPTablesRulesLastSync(f v1.IPFamily, table string, n int) {
	if m == nil {
		return
	}
	m.IPTablesRulesLastSync.WithLabelValues(table, family(f)).Set(float64(n))
}

// SetNoLocalEndpoints sets how many services with a Local traffic policy
// (TrafficPolicyInternal or TrafficPolicyExternal) have no local endpoints
// (kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy}).
func (m *Metrics) SetNoLocalEndpoints(f v1.IPFamily, trafficPolicy string, n int) {
	if m == nil {
		return
	}
	m.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(trafficPolicy, family(f)).Set(float64(n))
}

// IncHealthz counts one /healthz answer by HTTP status code
// (kubeproxy_proxy_healthz_total{code}).
func (m *Metrics) IncHealthz(code int) {
	if m == nil {
		return
	}
	m.ProxyHealthzTotal.WithLabelValues(strconv.Itoa(code)).Inc()
}

// IncLivez counts one /livez answer by HTTP status code
// (kubeproxy_proxy_livez_total{code}).
func (m *Metrics) IncLivez(code int) {
	if m == nil {
		return
	}
	m.ProxyLivezTotal.WithLabelValues(strconv.Itoa(code)).Inc()
}

// ObserveConntrackReconcile records one conntrack cleanup pass
// (kubeproxy_conntrack_reconciler_sync_duration_seconds) and how many
// entries it deleted (kubeproxy_conntrack_reconciler_deleted_entries_total).
func (m *Metrics) ObserveConntrackReconcile(f v1.IPFamily, d time.Duration, deleted int) {
	if m == nil {
		return
	}
	m.ReconcileConntrackFlowsLatency.WithLabelValues(family(f)).Observe(d.Seconds())
	if deleted > 0 {
		m.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(family(f)).Add(float64(deleted))
	}
}

// IncServiceHealthCheckListenFailures counts a health-check node port that
// could not be opened (kubeproxy_service_healthcheck_listen_failures_total).
func (m *Metrics) IncServiceHealthCheckListenFailures() {
	if m == nil {
		return
	}
	m.ServiceHealthCheckListenFailuresTotal.Inc()
}

// unixSeconds renders t the way kube-proxy does (fractional Unix seconds).
func unixSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

// Operations of IncWinKernelLBFailure.
const (
	LBCreate = "create"
	LBUpdate = "update"
	LBDelete = "delete"
)

// IncWinKernelLBFailure counts one failed HNS load-balancer operation (op
// is LBCreate, LBUpdate or LBDelete) with kube-proxy v1.37's labels:
// lbType is one of clusterip, nodeport, externalip, ingressip,
// healthcheck; errType one of network_not_found, port_already_exists,
// not_implemented, invalid_ip, other.
func (m *Metrics) IncWinKernelLBFailure(op string, f v1.IPFamily, lbType, errType string) {
	if m == nil {
		return
	}
	var c *prometheus.CounterVec
	switch op {
	case LBCreate:
		c = m.WinKernelLBCreateFailuresTotal
	case LBUpdate:
		c = m.WinKernelLBUpdateFailuresTotal
	case LBDelete:
		c = m.WinKernelLBDeleteFailuresTotal
	default:
		return
	}
	c.WithLabelValues(family(f), lbType, errType).Inc()
}

// SetNFTablesLocalhostNodePortListeners records the localhost node-port
// proxy's listeners (kubeproxy_nftables_localhost_nodeport_listeners).
func (m *Metrics) SetNFTablesLocalhostNodePortListeners(f v1.IPFamily, n int) {
	if m == nil {
		return
	}
	m.NFTablesLocalhostNodePortListeners.WithLabelValues(family(f)).Set(float64(n))
}

// IncNFTablesLocalhostNodePortListenerCreationFailures counts a localhost
// node-port listener that could not be opened
// (kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total).
func (m *Metrics) IncNFTablesLocalhostNodePortListenerCreationFailures(f v1.IPFamily) {
	if m == nil {
		return
	}
	m.NFTablesLocalhostNodePortListenerCreationFailuresTotal.WithLabelValues(family(f)).Inc()
}

// LocalhostNodePortRejected is the packets the nftables table of one
// family rejected on localhost node ports of one protocol (the named
// counter localhost-nodeport-rejected-<protocol>).
type LocalhostNodePortRejected struct {
	Family   v1.IPFamily
	Protocol v1.Protocol
	Packets  uint64
}

// NewLocalhostNodePortRejectedCollector returns the collector of
// kubeproxy_nftables_localhost_nodeport_rejected_packets_total (labels
// ip_family, protocol), which kube-proxy v1.37 registers in the nftables
// mode with the KubeProxyNFTablesLocalhostNodePorts gate on: each scrape
// calls read (nftables.LocalhostRejectedPackets reads the counters); a
// read that fails reports nothing. Register it alongside Register's
// collectors when the gate is on.
func NewLocalhostNodePortRejectedCollector(read func() ([]LocalhostNodePortRejected, error)) prometheus.Collector {
	return &rejectedCollector{read: read, desc: prometheus.NewDesc(
		Subsystem+"_nftables_localhost_nodeport_rejected_packets_total",
		alpha("Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running"),
		[]string{"ip_family", "protocol"}, nil)}
}

type rejectedCollector struct {
	read func() ([]LocalhostNodePortRejected, error)
	desc *prometheus.Desc
}

func (c *rejectedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *rejectedCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.read()
	if err != nil {
		return
	}
	for _, r := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(r.Packets), family(r.Family), string(r.Protocol))
	}
}
