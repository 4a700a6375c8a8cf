package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// upstreamRulesDir holds upstream kube-proxy v1.37.2's iptables rules for
// every step of the conformance table (IPv4 topology), as upstream's
// proxier writes them: see its README for how they were made.
const upstreamRulesDir = "testdata/trace/upstream-v1.37.2"

// TestExportTraceObjects writes, with SVCPROXY_EXPORT_TRACE_OBJECTS=DIR,
// each step of the conformance table (IPv4) as a YAML file of its
// objects and the engine settings, for the program that runs upstream's
// proxier on them (testdata/trace/upstream-v1.37.2/README.md).
func TestExportTraceObjects(t *testing.T) {
	dir := os.Getenv("SVCPROXY_EXPORT_TRACE_OBJECTS")
	if dir == "" {
		t.Skip("set SVCPROXY_EXPORT_TRACE_OBJECTS=DIR to export the conformance table's steps for upstream's proxier")
	}
	topo := proxytest.DefaultTopology(v1.IPv4Protocol)
	for _, sc := range proxytest.Scenarios(topo) {
		for _, st := range sc.Steps {
			b, err := yaml.Marshal(map[string]any{
				"nodeName":      topo.NodeName,
				"nodeIP":        topo.NodeIP.String(),
				"clusterCIDR":   topo.ClusterCIDR.String(),
				"masqueradeAll": sc.Options.MasqueradeAll,
				"node":          st.Node,
				"services":      st.Services,
				"slices":        st.EndpointSlices,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, proxytest.StepFileName(sc.Name, st.Name)+".yaml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fmt.Println("exported to", dir)
}
