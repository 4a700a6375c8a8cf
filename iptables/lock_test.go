package iptables_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// While another program holds the xtables lock, each sync fails with an
// error matching xtables.ErrLockHeld (here injected into the fake's
// Restore, as the real runner returns it after its bounded wait); Run
// retries (the base's backoff) and converges once the lock is free.
// Driven by a fake clock.
func TestLockHeldRunRetriesAndConverges(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var outcomes []engine.SyncOutcome
	cfg := ipv4Config
	cfg.Clock = clk
	cfg.OnSync = func(o engine.SyncOutcome) {
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	}
	p, fake := newTestProxier(t, cfg, v1.IPv4Protocol)
	lockErr := &xtables.RestoreError{Output: "Another app is currently holding the xtables lock.",
		Err: &xtables.LockError{Tool: "iptables-restore", Wait: 5 * time.Second}}
	fake.FailOn("Restore", 3, lockErr)
	p.OnServiceAdd(svc("ns", "a", "172.30.0.1"))
	p.OnEndpointSliceAdd(slice("ns", "a", "", ep{ip: "10.0.0.1"}))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	converged := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) > 0 && outcomes[len(outcomes)-1].Err == nil
	}
	for i := 0; i < 20 && !converged(); i++ {
		waitFor(t, "runner waiting", clk.HasWaiters)
		clk.Step(time.Second)
		time.Sleep(10 * time.Millisecond) // let the loop run what is due
	}
	waitFor(t, "convergence", converged)

	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 4 {
		t.Fatalf("%d sync attempts, want 3 failures then a success", len(outcomes))
	}
	for _, o := range outcomes[:3] {
		if !errors.Is(o.Err, xtables.ErrLockHeld) {
			t.Errorf("failed sync error %v, want one matching xtables.ErrLockHeld", o.Err)
		}
	}
	// Retries are spaced (the base's backoff starts at 1 s), never a hot loop.
	for i := 1; i < len(outcomes); i++ {
		if d := outcomes[i].Start.Sub(outcomes[i-1].Start); d < time.Second {
			t.Errorf("attempt %d came %v after the previous one, want at least the 1 s retry interval", i+1, d)
		}
	}
	if st := p.Stats(); st.Failures != 3 || st.ConsecutiveFailures != 0 {
		t.Errorf("Stats %+v, want 3 failures and none since", st)
	}
}
