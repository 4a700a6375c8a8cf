package metrics

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
)

// touchAll calls every recording method once with recognisable values.
func touchAll(m *Metrics) {
	m.ObserveSync(v1.IPv4Protocol, 3*time.Millisecond)
	m.ObserveFullSync(v1.IPv4Protocol, 5*time.Millisecond)
	m.ObservePartialSync(v1.IPv6Protocol, time.Millisecond)
	m.SetLastSync(v1.IPv4Protocol, time.Unix(1700000000, 500000000))
	m.SetLastQueued(v1.IPv4Protocol, time.Unix(1700000001, 0))
	m.ObserveNetworkProgramming(v1.IPv4Protocol, 1500*time.Millisecond)
	m.SetEndpointChangesPending(7)
	m.IncEndpointChanges()
	m.SetServiceChangesPending(2)
	m.IncServiceChanges()
	m.IncIPTablesRestoreFailures(v1.IPv4Protocol)
	m.IncIPTablesPartialRestoreFailures(v1.IPv4Protocol)
	m.SetIPTablesRules(v1.IPv4Protocol, TableNAT, 120)
	m.SetIPTablesRulesLastSync(v1.IPv4Protocol, TableFilter, 4)
	m.SetNoLocalEndpoints(v1.IPv4Protocol, TrafficPolicyExternal, 3)
	m.IncHealthz(200)
	m.IncLivez(503)
	m.ObserveConntrackReconcile(v1.IPv6Protocol, 2*time.Millisecond, 9)
	m.IncServiceHealthCheckListenFailures()
	m.IncWinKernelLBFailure(LBCreate, v1.IPv4Protocol, "clusterip", "port_already_exists")
	m.IncWinKernelLBFailure(LBUpdate, v1.IPv6Protocol, "nodeport", "not_implemented")
	m.IncWinKernelLBFailure(LBDelete, v1.IPv4Protocol, "healthcheck", "other")
	m.SetNFTablesLocalhostNodePortListeners(v1.IPv4Protocol, 2)
	m.IncNFTablesLocalhostNodePortListenerCreationFailures(v1.IPv6Protocol)
	m.SetFastWriterActive(v1.IPv4Protocol, WriterNFTablesNetlink, true)
	m.IncFastWriterHandedToTool(v1.IPv4Protocol, WriterNFTablesNetlink, "refused")
	m.IncFastWriterSwitchedOff(v1.IPv4Protocol, WriterLegacyInProcess, "self-check")
	m.SetFastWriterBuffers(v1.IPv4Protocol, WriterNFTablesNetlink, 1<<20, 4<<20)
}

func TestNamesMatchKubeProxy(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	touchAll(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetHelp()
	}
	want := map[string]string{
		"kubeproxy_sync_proxy_rules_duration_seconds":                        "[ALPHA] SyncProxyRules latency in seconds",
		"kubeproxy_sync_full_proxy_rules_duration_seconds":                   "[ALPHA] SyncProxyRules latency in seconds for full resyncs",
		"kubeproxy_sync_partial_proxy_rules_duration_seconds":                "[ALPHA] SyncProxyRules latency in seconds for partial resyncs",
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds":                  "[ALPHA] The last time proxy rules were successfully synced",
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds":           "[ALPHA] The last time a sync of proxy rules was queued",
		"kubeproxy_network_programming_duration_seconds":                     "[ALPHA] In Cluster Network Programming Latency in seconds",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending":                "[ALPHA] Pending proxy rules Endpoint changes",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":                  "[ALPHA] Cumulative proxy rules Endpoint changes",
		"kubeproxy_sync_proxy_rules_service_changes_pending":                 "[ALPHA] Pending proxy rules Service changes",
		"kubeproxy_sync_proxy_rules_service_changes_total":                   "[ALPHA] Cumulative proxy rules Service changes",
		"kubeproxy_sync_proxy_rules_iptables_restore_failures_total":         "[ALPHA] Cumulative proxy iptables restore failures",
		"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total": "[ALPHA] Cumulative proxy iptables partial restore failures",
		"kubeproxy_sync_proxy_rules_iptables_total":                          "[ALPHA] Total number of iptables rules owned by kube-proxy",
		"kubeproxy_sync_proxy_rules_iptables_last":                           "[ALPHA] Number of iptables rules written by kube-proxy in last sync",
		"kubeproxy_sync_proxy_rules_no_local_endpoints_total":                "[ALPHA] Number of services with a Local traffic policy and no endpoints",
		"kubeproxy_proxy_healthz_total":                                      "[ALPHA] Cumulative proxy healthz HTTP status",
		"kubeproxy_proxy_livez_total":                                        "[ALPHA] Cumulative proxy livez HTTP status",
		"kubeproxy_conntrack_reconciler_sync_duration_seconds":               "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds",
		"kubeproxy_conntrack_reconciler_deleted_entries_total":               "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler",
		"kubeproxy_service_healthcheck_listen_failures_total":                "Cumulative failures to open a service health-check node port",
		// kube-proxy v1.37's winkernel load-balancer failures (#137767).
		"kubeproxy_sync_proxy_rules_winkernel_lb_create_failures_total":          "[ALPHA] Cumulative proxy winkernel lb create failures",
		"kubeproxy_sync_proxy_rules_winkernel_lb_update_failures_total":          "[ALPHA] Cumulative proxy winkernel lb update failures",
		"kubeproxy_sync_proxy_rules_winkernel_lb_delete_failures_total":          "[ALPHA] Cumulative proxy winkernel lb delete failures",
		"kubeproxy_nftables_localhost_nodeport_listeners":                        "[ALPHA] Number of active localhost NodePort userspace proxy listeners.",
		"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total": "[ALPHA] Number of localhost NodePort userspace proxy listener creation failures.",
		// svcproxy's own writers.
		"kubeproxy_fast_writer_active":               "1 while a writer that bypasses the standard tool (iptables-legacy tables written in process, nftables over netlink) writes, 0 while the tool does",
		"kubeproxy_fast_writer_handed_to_tool_total": "Inputs a fast writer left to the standard tool, by reason (unsupported, refused)",
		"kubeproxy_fast_writer_switched_off_total":   "Fast writers switched off for the rest of the process, by reason (refusals the tool took, self-check)",
		"kubeproxy_fast_writer_buffer_bytes":         "Bytes of the buffers a fast writer encodes into outside the Go heap, by state (resident, mapped)",
	}
	for name, help := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("metric %s missing", name)
		} else if g != help {
			t.Errorf("metric %s help = %q, want %q", name, g, help)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected metric %s", name)
		}
	}
}

func TestValuesAndLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	touchAll(m)
	m.IncHealthz(200)

	expected := `
# HELP kubeproxy_sync_proxy_rules_iptables_total [ALPHA] Total number of iptables rules owned by kube-proxy
# TYPE kubeproxy_sync_proxy_rules_iptables_total gauge
kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"} 120
# HELP kubeproxy_sync_proxy_rules_no_local_endpoints_total [ALPHA] Number of services with a Local traffic policy and no endpoints
# TYPE kubeproxy_sync_proxy_rules_no_local_endpoints_total gauge
kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 3
# HELP kubeproxy_proxy_healthz_total [ALPHA] Cumulative proxy healthz HTTP status
# TYPE kubeproxy_proxy_healthz_total counter
kubeproxy_proxy_healthz_total{code="200"} 2
# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds [ALPHA] The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.7000000005e+09
# HELP kubeproxy_conntrack_reconciler_deleted_entries_total [ALPHA] Cumulative conntrack flows deleted by conntrack reconciler
# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter
kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv6"} 9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"kubeproxy_sync_proxy_rules_iptables_total",
		"kubeproxy_sync_proxy_rules_no_local_endpoints_total",
		"kubeproxy_proxy_healthz_total",
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds",
		"kubeproxy_conntrack_reconciler_deleted_entries_total",
	); err != nil {
		t.Error(err)
	}

	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"endpoint changes pending", m.EndpointChangesPending, 7},
		{"endpoint changes total", m.EndpointChangesTotal, 1},
		{"service changes pending", m.ServiceChangesPending, 2},
		{"service changes total", m.ServiceChangesTotal, 1},
		{"restore failures", m.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4"), 1},
		{"partial restore failures", m.IPTablesPartialRestoreFailuresTotal.WithLabelValues("IPv4"), 1},
		{"rules last sync", m.IPTablesRulesLastSync.WithLabelValues("filter", "IPv4"), 4},
		{"livez 503", m.ProxyLivezTotal.WithLabelValues("503"), 1},
		{"last queued", m.SyncProxyRulesLastQueuedTimestamp.WithLabelValues("IPv4"), 1700000001},
		{"listen failures", m.ServiceHealthCheckListenFailuresTotal, 1},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestHistogramBuckets(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	touchAll(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	buckets := map[string]int{}
	for _, mf := range mfs {
		if h := mf.GetMetric()[0].GetHistogram(); h != nil {
			buckets[mf.GetName()] = len(h.GetBucket())
			if mf.GetName() == "kubeproxy_sync_proxy_rules_duration_seconds" {
				if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.003 {
					t.Errorf("sync histogram: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
				}
				if first := h.GetBucket()[0].GetUpperBound(); first != 0.001 {
					t.Errorf("first sync bucket %v, want 0.001", first)
				}
			}
		}
	}
	// kube-proxy: 15 exponential sync buckets; 2+59+12+7 programming buckets.
	want := map[string]int{
		"kubeproxy_sync_proxy_rules_duration_seconds":          15,
		"kubeproxy_sync_full_proxy_rules_duration_seconds":     15,
		"kubeproxy_sync_partial_proxy_rules_duration_seconds":  15,
		"kubeproxy_conntrack_reconciler_sync_duration_seconds": 15,
		"kubeproxy_network_programming_duration_seconds":       80,
	}
	for name, n := range want {
		if buckets[name] != n {
			t.Errorf("%s has %d buckets, want %d", name, buckets[name], n)
		}
	}
}

func TestNegativeNetworkProgrammingIsDropped(t *testing.T) {
	m := New()
	m.ObserveNetworkProgramming(v1.IPv4Protocol, -time.Second)
	if n := testutil.CollectAndCount(m.NetworkProgrammingLatency); n != 0 {
		t.Errorf("negative duration recorded (%d series)", n)
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	err := m.Register(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second Register: %v, want AlreadyRegisteredError", err)
	}
	// A second, independent Metrics cannot share the registry either, but
	// can use its own.
	if err := New().Register(reg); err == nil {
		t.Error("two Metrics registered in one registry")
	}
	if err := New().Register(prometheus.NewRegistry()); err != nil {
		t.Errorf("fresh registry: %v", err)
	}
	if err := m.Register(nil); err == nil {
		t.Error("Register(nil) did not fail")
	}
}

func TestNilMetricsIsNoOp(t *testing.T) {
	var m *Metrics
	touchAll(m) // must not panic
	if err := m.Register(prometheus.NewRegistry()); err != nil {
		t.Errorf("nil Register: %v", err)
	}
}

func TestCollectorsComplete(t *testing.T) {
	// Every exported collector field must be registered.
	m := New()
	reg := prometheus.NewRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	touchAll(m)
	mfs, _ := reg.Gather()
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	if len(names) != len(m.collectors()) {
		t.Errorf("gathered %d metrics, have %d collectors: %v", len(names), len(m.collectors()), names)
	}
}

// The localhost node-port rejection collector reports what its reader
// returns, with kube-proxy v1.37's name, help and labels.
func TestLocalhostNodePortRejectedCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := NewLocalhostNodePortRejectedCollector(func() ([]LocalhostNodePortRejected, error) {
		return []LocalhostNodePortRejected{{Family: v1.IPv4Protocol, Protocol: v1.ProtocolUDP, Packets: 3}}, nil
	})
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	expected := `
# HELP kubeproxy_nftables_localhost_nodeport_rejected_packets_total [ALPHA] Number of packets rejected on localhost NodePorts. UDP and SCTP are always rejected; TCP is rejected when the localhost NodePort proxy is not running
# TYPE kubeproxy_nftables_localhost_nodeport_rejected_packets_total counter
kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family="IPv4",protocol="UDP"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected)); err != nil {
		t.Error(err)
	}
}
