package healthcheck_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/proxy/healthcheck"
)

func Example() {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	hs := healthcheck.NewProxyHealthServer(healthcheck.ProxyHealthConfig{
		HealthTimeout: time.Minute, // twice the sync period
		Clock:         clk,
	})
	probe := func() {
		rec := httptest.NewRecorder()
		hs.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		fmt.Println(rec.Code, rec.Body.String())
	}

	probe() // before the first sync
	hs.OnNodeAdd(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}})
	hs.Updated(v1.IPv4Protocol) // an engine finished a sync
	probe()
	// Output:
	// 503 {"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2026-01-01T00:00:00Z","nodeEligible":false,"healthy":false}
	// 200 {"lastUpdated":"2026-01-01T00:00:00Z","currentTime":"2026-01-01T00:00:00Z","nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":"2026-01-01T00:00:00Z","healthy":true}}}
}
