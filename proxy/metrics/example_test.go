package metrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/proxy/metrics"
)

func Example() {
	reg := prometheus.NewRegistry()
	m := metrics.New()
	if err := m.Register(reg); err != nil {
		panic(err)
	}

	// An engine records each sync.
	m.ObserveSync(v1.IPv4Protocol, 12*time.Millisecond)
	m.SetIPTablesRules(v1.IPv4Protocol, metrics.TableNAT, 42)
	m.IncServiceChanges()

	n, _ := testutil.GatherAndCount(reg, "kubeproxy_sync_proxy_rules_duration_seconds")
	fmt.Println("sync histograms:", n)
	fmt.Println("nat rules:", testutil.ToFloat64(m.IPTablesRulesTotal.WithLabelValues("nat", "IPv4")))

	// A nil *Metrics is valid and records nothing.
	var off *metrics.Metrics
	off.ObserveSync(v1.IPv4Protocol, time.Second)
	// Output:
	// sync histograms: 1
	// nat rules: 42
}
