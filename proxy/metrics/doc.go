// Package metrics holds the Prometheus metrics of a service proxy, with
// kube-proxy's names, help texts (including the "[ALPHA] " prefix that
// k8s.io/component-base adds), label names and histogram buckets, so that
// dashboards and alerts written for kube-proxy work unchanged.
//
// There is no global state: New returns a fresh set of collectors and
// (*Metrics).Register adds them to the prometheus.Registerer of your choice.
// Engines take a *Metrics in their Config; every method is a no-op on a nil
// *Metrics, so leaving it unset disables metrics at no cost.
//
// Like kube-proxy 1.34, per-engine metrics carry an ip_family label ("IPv4"
// or "IPv6"), so the two engines of a dual-stack proxy share one *Metrics.
// The change counters and pending gauges have no family label, as upstream.
//
// kube-proxy v1.37's Windows load-balancer failure counters
// (kubeproxy_sync_proxy_rules_winkernel_lb_{create,update,delete}_failures_total,
// labels ip_family, lb_type, error) are here too; only the winkernel engine
// increments them (IncWinKernelLBFailure).
//
// Three are kube-proxy v1.37's, of its nftables mode's localhost node
// ports (the KubeProxyNFTablesLocalhostNodePorts gate):
// kubeproxy_nftables_localhost_nodeport_listeners and
// kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total
// (registered with the rest; they show only once set), and
// kubeproxy_nftables_localhost_nodeport_rejected_packets_total, read from
// nftables counters at each scrape by NewLocalhostNodePortRejectedCollector,
// which the embedder registers when it turns the feature on.
//
// One metric is ours, not kube-proxy's:
// kubeproxy_service_healthcheck_listen_failures_total counts health-check
// node ports that could not be opened (kube-proxy only logs them).
package metrics
