package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	clocktesting "k8s.io/utils/clock/testing"
)

// livenessTimeout only guards against a hung loop; no test result depends
// on how long anything takes.
const livenessTimeout = 30 * time.Second

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness runs a Runner on a fake clock in lock step: after every action it
// waits until the loop is blocked again, so "no run happened" is observed
// deterministically, not by sleeping.
type harness struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	r     *Runner
	idle  chan idleState
	state idleState

	mu   sync.Mutex
	runs []time.Duration // offsets from t0 at which fn started

	cancel context.CancelFunc
	done   chan error
}

// fnBehaviour lets a case make run n (0-based) fail, take time, or trigger.
type fnBehaviour struct {
	fail     func(n int) bool
	duration func(n int) time.Duration
	// triggerDuring makes run n call Trigger while it runs.
	triggerDuring func(n int) bool
	// notRun makes run n return ErrNotRun.
	notRun func(n int) bool
}

func newHarness(t *testing.T, cfg Config, b fnBehaviour, preTrigger bool) *harness {
	t.Helper()
	h := &harness{
		t:    t,
		clk:  clocktesting.NewFakeClock(t0),
		idle: make(chan idleState),
		done: make(chan error, 1),
	}
	cfg.Clock = h.clk
	cfg.Logger = testr.New(t)
	fn := func(ctx context.Context) error {
		h.mu.Lock()
		n := len(h.runs)
		h.runs = append(h.runs, h.clk.Since(t0))
		h.mu.Unlock()
		if b.triggerDuring != nil && b.triggerDuring(n) {
			h.r.Trigger()
		}
		if b.duration != nil {
			if d := b.duration(n); d > 0 {
				h.clk.Step(d) // simulates a slow run; no timer is armed meanwhile
			}
		}
		if b.fail != nil && b.fail(n) {
			return errors.New("injected failure")
		}
		if b.notRun != nil && b.notRun(n) {
			return fmt.Errorf("only a check: %w", ErrNotRun)
		}
		return nil
	}
	h.r = New("test", fn, cfg)
	h.r.idle = h.idle
	if preTrigger {
		h.r.Trigger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.r.Run(ctx) }()
	h.waitIdle()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) waitIdle() {
	h.t.Helper()
	select {
	case h.state = <-h.idle:
	case <-time.After(livenessTimeout):
		h.t.Fatal("runner loop did not block again")
	}
}

// trigger calls Trigger; the loop is blocked, so it always wakes once.
func (h *harness) trigger() {
	h.t.Helper()
	h.r.Trigger()
	h.waitIdle()
}

// advance moves the clock by d and, when that fires the loop's timer,
// waits for the loop to block again.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clk.Step(d)
	if !h.state.wakeAt.IsZero() && !h.state.wakeAt.After(h.clk.Now()) {
		h.waitIdle()
	}
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	// The loop may be sending an idle report or blocked in select.
	for {
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Run returned %v, want nil", err)
			}
			return
		case <-h.idle:
		case <-time.After(livenessTimeout):
			h.t.Fatal("Run did not return after cancel")
			return
		}
	}
}

func (h *harness) runTimes() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Duration(nil), h.runs...)
}

// play runs a script: "T" triggers, "+<duration>" advances the clock.
func (h *harness) play(script string) {
	h.t.Helper()
	for _, op := range strings.Fields(script) {
		switch {
		case op == "T":
			h.trigger()
		case strings.HasPrefix(op, "+"):
			d, err := time.ParseDuration(op[1:])
			if err != nil {
				h.t.Fatalf("bad script op %q: %v", op, err)
			}
			h.advance(d)
		default:
			h.t.Fatalf("bad script op %q", op)
		}
	}
}

func durations(t *testing.T, s string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, f := range strings.Fields(s) {
		d, err := time.ParseDuration(f)
		if err != nil {
			t.Fatalf("bad duration %q", f)
		}
		out = append(out, d)
	}
	return out
}

func TestRunnerSchedule(t *testing.T) {
	failFirst := func(k int) func(int) bool { return func(n int) bool { return n < k } }
	tests := []struct {
		name       string
		cfg        Config
		b          fnBehaviour
		preTrigger bool
		script     string
		want       string // run start offsets
	}{
		{
			name:   "nothing runs without a trigger or MaxInterval",
			script: "+1h +1h",
			want:   "",
		},
		{
			name:   "trigger runs at once",
			script: "+3s T +1s",
			want:   "3s",
		},
		{
			name:   "every trigger runs when there is no MinInterval",
			script: "T T +1ms T",
			want:   "0s 0s 1ms",
		},
		{
			name:   "a trigger before Run is remembered",
			script: "+1s", preTrigger: true,
			want: "0s",
		},
		{
			name:   "a run that returns ErrNotRun does not hold back the next by MinInterval",
			cfg:    Config{MinInterval: time.Second},
			b:      fnBehaviour{notRun: func(n int) bool { return n == 1 }},
			script: "T +5s T +100ms T +2s",
			want:   "0s 5s 5.1s",
		},
		{
			name:   "a run that returns ErrNotRun does not restart the MaxInterval count",
			cfg:    Config{MaxInterval: 5 * time.Second},
			b:      fnBehaviour{notRun: func(n int) bool { return n == 0 }},
			script: "+3s T +2s +1s",
			want:   "3s 5s",
		},
		{
			name:   "MinInterval delays an early trigger",
			cfg:    Config{MinInterval: time.Second},
			script: "T +500ms T +499ms +1ms +5s",
			want:   "0s 1s",
		},
		{
			name:   "triggers within MinInterval coalesce into one run",
			cfg:    Config{MinInterval: time.Second},
			script: "T +100ms T +100ms T +100ms T +700ms +10s",
			want:   "0s 1s",
		},
		{
			name:   "a trigger after MinInterval runs at once",
			cfg:    Config{MinInterval: time.Second},
			script: "T +2s T +2s",
			want:   "0s 2s",
		},
		{
			name:   "MaxInterval runs with no trigger, counted from Run start",
			cfg:    Config{MaxInterval: 5 * time.Second},
			script: "+4s +1s +5s +4s",
			want:   "5s 10s",
		},
		{
			name:   "MaxInterval counts from the last run, triggered or not",
			cfg:    Config{MaxInterval: 5 * time.Second},
			script: "+3s T +4s +1s +5s",
			want:   "3s 8s 13s",
		},
		{
			name: "MaxInterval counts from the end of a slow run",
			cfg:  Config{MaxInterval: 5 * time.Second},
			b:    fnBehaviour{duration: func(int) time.Duration { return 2 * time.Second }},
			// Run 1 starts at 5s and ends at 7s; run 2 is due at 12s.
			script: "+5s +4s +1s",
			want:   "5s 12s",
		},
		{
			name:   "MaxInterval shorter than MinInterval is raised",
			cfg:    Config{MinInterval: 3 * time.Second, MaxInterval: time.Second},
			script: "+1s +1s +1s +3s",
			want:   "3s 6s",
		},
		{
			name:   "failed run is retried after RetryInterval until it succeeds",
			cfg:    Config{RetryInterval: 2 * time.Second},
			b:      fnBehaviour{fail: failFirst(2)},
			script: "T +1s +1s +1s +1s +1h",
			want:   "0s 2s 4s",
		},
		{
			name: "MaxRetryInterval doubles the delay per consecutive failure, up to the cap",
			cfg:  Config{RetryInterval: time.Second, MaxRetryInterval: 4 * time.Second},
			b:    fnBehaviour{fail: failFirst(5)},
			// Failures at 0s, 1s, 3s, 7s, 11s; delays 1s 2s 4s 4s(cap) 4s; success at 15s.
			script: "T +1s +2s +4s +4s +4s +1h",
			want:   "0s 1s 3s 7s 11s 15s",
		},
		{
			name: "backoff starts over after a success",
			cfg:  Config{RetryInterval: time.Second, MaxRetryInterval: 8 * time.Second},
			b:    fnBehaviour{fail: func(n int) bool { return n < 2 || n == 3 }},
			// Fail 0s, fail 1s (retry +2s), success 3s; trigger at 5s fails, retried after 1s again.
			script: "T +1s +2s +2s T +1s +1h",
			want:   "0s 1s 3s 5s 6s",
		},
		{
			name:   "RetryInterval defaults to MinInterval",
			cfg:    Config{MinInterval: 3 * time.Second},
			b:      fnBehaviour{fail: failFirst(1)},
			script: "T +2s +1s +1h",
			want:   "0s 3s",
		},
		{
			name:   "RetryInterval defaults to one second",
			b:      fnBehaviour{fail: failFirst(1)},
			script: "T +999ms +1ms +1h",
			want:   "0s 1s",
		},
		{
			name:   "retry still respects MinInterval",
			cfg:    Config{MinInterval: 5 * time.Second, RetryInterval: time.Second},
			b:      fnBehaviour{fail: failFirst(1)},
			script: "T +1s +3s +1s +1h",
			want:   "0s 5s",
		},
		{
			name:   "retry is counted from the end of the failed run",
			cfg:    Config{RetryInterval: 2 * time.Second},
			b:      fnBehaviour{fail: failFirst(1), duration: func(n int) time.Duration { return time.Second * time.Duration(1-min(n, 1)) }},
			script: "T +1s +1s +1h",
			// Run 1 starts at 0s, ends at 1s, retried at 3s.
			want: "0s 3s",
		},
		{
			name:   "a trigger after a failure runs before the retry when MinInterval allows",
			cfg:    Config{RetryInterval: 10 * time.Second},
			b:      fnBehaviour{fail: failFirst(1)},
			script: "T +1s T +1h",
			want:   "0s 1s",
		},
		{
			name:   "a trigger during a run causes one more run after it",
			cfg:    Config{MinInterval: time.Second},
			b:      fnBehaviour{triggerDuring: func(n int) bool { return n == 0 }},
			script: "T +1s +1h",
			want:   "0s 1s",
		},
		{
			name:   "failures and MaxInterval together",
			cfg:    Config{MinInterval: time.Second, MaxInterval: 10 * time.Second, RetryInterval: 2 * time.Second},
			b:      fnBehaviour{fail: func(n int) bool { return n == 1 }},
			script: "+10s +10s +2s +8s +2s",
			want:   "10s 20s 22s 32s",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, tc.b, tc.preTrigger)
			h.play(tc.script)
			got := h.runTimes()
			want := durations(t, tc.want)
			if len(got) != len(want) {
				t.Fatalf("runs at %v, want %v", got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("runs at %v, want %v", got, want)
				}
			}
		})
	}
}

func TestTriggerNeverBlocksAndCoalesces(t *testing.T) {
	calls := 0
	r := New("coalesce", func(context.Context) error { calls++; return nil }, Config{Clock: clocktesting.NewFakeClock(t0)})
	for range 10000 {
		r.Trigger() // no loop is running: must not block
	}
	idle := make(chan idleState)
	r.idle = idle
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-idle:
	case <-time.After(livenessTimeout):
		t.Fatal("loop did not block")
	}
	if calls != 1 {
		t.Errorf("10000 triggers before Run gave %d runs, want 1", calls)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v, want nil", err)
	}
}

func TestRunReturnsNilWhenContextEndsDuringRun(t *testing.T) {
	started := make(chan struct{})
	var sawCancel bool
	r := New("cancel", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		sawCancel = true
		return ctx.Err()
	}, Config{Clock: clocktesting.NewFakeClock(t0)})
	r.Trigger()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	case <-time.After(livenessTimeout):
		t.Fatal("Run did not return after cancel")
	}
	if !sawCancel {
		t.Error("fn did not see the cancellation")
	}
}

func TestRunWithCancelledContextRunsNothing(t *testing.T) {
	calls := 0
	r := New("dead", func(context.Context) error { calls++; return nil }, Config{})
	r.Trigger()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Errorf("Run returned %v, want nil", err)
	}
	if calls != 0 {
		t.Errorf("fn ran %d times on a cancelled context", calls)
	}
}

func TestRealClock(t *testing.T) {
	ran := make(chan struct{}, 10)
	r := New("real", func(context.Context) error { ran <- struct{}{}; return nil }, Config{MinInterval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for i := range 3 {
		r.Trigger()
		select {
		case <-ran:
		case <-time.After(livenessTimeout):
			t.Fatalf("trigger %d did not cause a run", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	for name, f := range map[string]func(){
		"nil fn":            func() { New("x", nil, Config{}) },
		"negative interval": func() { New("x", func(context.Context) error { return nil }, Config{MinInterval: -1}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			f()
		})
	}
}
