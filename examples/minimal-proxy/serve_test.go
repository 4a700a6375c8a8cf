package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

// /healthz and /livez bodies say "healthy" exactly when they answer 200:
// a synced proxy on a node being deleted answers 503 and healthy false.
func TestHealthBodiesAgreeWithStatus(t *testing.T) {
	health := healthcheck.NewProxyHealthServer(healthcheck.ProxyHealthConfig{})
	h := consistentHealth(health.Handler())
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
