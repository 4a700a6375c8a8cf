package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy"
	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

// /healthz and /livez bodies say "healthy" exactly when they answer 200:
// a synced proxy on a node being deleted answers 503 and healthy false.
func TestHealthBodiesAgreeWithStatus(t *testing.T) {
	health := healthcheck.NewProxyHealthServer(healthcheck.ProxyHealthConfig{})
	h := health.Handler()
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
		}
		return rec.Code, body
	}
	check := func(when, path string, wantCode int) {
		t.Helper()
		code, body := get(path)
		if code != wantCode || body["healthy"] != (code == http.StatusOK) {
			t.Errorf("%s: %s = %d with healthy=%v, want %d and healthy=%v", when, path, code, body["healthy"], wantCode, wantCode == http.StatusOK)
		}
	}
	check("before the first sync", "/healthz", http.StatusServiceUnavailable)
	health.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}})
	health.Updated(v1.IPv4Protocol)
	check("synced", "/healthz", http.StatusOK)
	check("synced", "/livez", http.StatusOK)
	now := metav1.NewTime(time.Now())
	health.OnNodeUpdate(nil, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &now}})
	check("node being deleted", "/healthz", http.StatusServiceUnavailable)
	check("node being deleted", "/livez", http.StatusOK)
}

// The objects file's counters move when a running proxy meets a bad object
// and a file cut short.
func TestObjectsFileCounters(t *testing.T) {
	path := writeFile(t, "objects.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}]}\n")
	s, err := newFileSource(path, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := s.registerMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.run(ctx, nopProvider{}) }()
	counters := func() (skipped, rejected float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "svcproxy_objects_file_skipped_objects_total":
				skipped = mf.GetMetric()[0].GetCounter().GetValue()
			case "svcproxy_objects_file_rejected_reads_total":
				rejected = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
		}
	}
	waitFor("first read", func() bool { return s.stats().Reads == 1 })
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIP: 10.96.0.1, ports: [{port: 80}], typo: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("a skipped object counted", func() bool { sk, _ := counters(); return sk == 1 })
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Serv"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("a rejected read counted", func() bool { _, rj := counters(); return rj == 1 })
}

// nopProvider takes every event and does nothing.
type nopProvider struct{ proxy.Provider }

func (nopProvider) OnServiceAdd(*v1.Service)                            {}
func (nopProvider) OnServiceUpdate(_, _ *v1.Service)                    {}
func (nopProvider) OnServiceDelete(*v1.Service)                         {}
func (nopProvider) OnServiceSynced()                                    {}
func (nopProvider) OnEndpointSliceAdd(*discovery.EndpointSlice)         {}
func (nopProvider) OnEndpointSliceUpdate(_, _ *discovery.EndpointSlice) {}
func (nopProvider) OnEndpointSliceDelete(*discovery.EndpointSlice)      {}
func (nopProvider) OnEndpointSlicesSynced()                             {}
func (nopProvider) OnNodeAdd(*v1.Node)                                  {}
func (nopProvider) OnNodeUpdate(_, _ *v1.Node)                          {}
func (nopProvider) OnNodeDelete(*v1.Node)                               {}
func (nopProvider) OnNodeSynced()                                       {}
