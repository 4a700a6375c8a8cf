package runner

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Config configures a Runner. Every field has a usable zero value.
type Config struct {
	// MinInterval: runs start at least this far apart (0: no limit). A
	// Trigger that arrives sooner is remembered and served when the interval
	// has passed.
	MinInterval time.Duration
	// MaxInterval: a run happens at least this long after the previous one
	// ended, even with no Trigger (0: never). A MaxInterval shorter than
	// MinInterval is raised to MinInterval.
	MaxInterval time.Duration
	// RetryInterval: after a failed run, the next run starts this long after
	// the failure (still no sooner than MinInterval after the failed run
	// started). 0 means MinInterval, or 1s if that is 0 too.
	RetryInterval time.Duration
	// MaxRetryInterval turns on exponential backoff: each consecutive
	// failure doubles the retry delay, from RetryInterval up to this cap.
	// 0 (or anything below RetryInterval) keeps the delay at RetryInterval.
	MaxRetryInterval time.Duration
	// Clock drives every timer; nil means the real clock. Tests pass a
	// k8s.io/utils/clock/testing.FakeClock.
	Clock clock.WithTicker
	// Logger receives failed runs (as errors) and scheduling details (V(4)).
	// The zero value discards.
	Logger logr.Logger
}

// ErrNotRun is what fn returns when it found nothing to do worth counting
// as a run (a cheap check that turned up nothing, say): the run neither
// delays the next one by MinInterval nor restarts the MaxInterval count,
// and it is not a failure. fn may wrap it.
var ErrNotRun = errors.New("runner: nothing was run")

// defaultRetryInterval is the retry interval when neither RetryInterval nor
// MinInterval is set: failing runs must not spin.
const defaultRetryInterval = time.Second

// Runner calls a function when triggered, no more often than MinInterval,
// at least every MaxInterval, and again after RetryInterval when it fails.
// The function is only ever called from the goroutine running Run, so it
// never runs concurrently with itself.
type Runner struct {
	name    string
	fn      func(ctx context.Context) error
	cfg     Config
	trigger chan struct{}

	// idle, when set (tests only), receives the scheduling state each time
	// the loop is about to block. The send blocks, which lets a test drive
	// the loop in lock step with its fake clock.
	idle chan<- idleState
}

// idleState is what the loop reports before it blocks (tests only).
type idleState struct {
	// wakeAt is when the loop's timer fires; zero when no timer is set.
	wakeAt time.Time
}

// New returns a Runner that calls fn; name identifies it in logs. Run
// starts the loop; nothing runs before that.
func New(name string, fn func(ctx context.Context) error, cfg Config) *Runner {
	if fn == nil {
		panic("runner.New: fn is nil")
	}
	if cfg.MinInterval < 0 || cfg.MaxInterval < 0 || cfg.RetryInterval < 0 || cfg.MaxRetryInterval < 0 {
		panic("runner.New: negative interval")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxInterval > 0 && cfg.MaxInterval < cfg.MinInterval {
		cfg.MaxInterval = cfg.MinInterval
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = cfg.MinInterval
		if cfg.RetryInterval == 0 {
			cfg.RetryInterval = defaultRetryInterval
		}
	}
	return &Runner{
		name:    name,
		fn:      fn,
		cfg:     cfg,
		trigger: make(chan struct{}, 1),
	}
}

// Trigger asks for a run as soon as MinInterval allows. It never blocks:
// any number of Triggers before the next run starts collapse into that one
// run. A Trigger that arrives while fn is running causes one more run after
// it. Triggers made before Run is called are remembered.
func (r *Runner) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// schedule is the loop's scheduling state; all times come from the clock.
type schedule struct {
	cfg Config

	// pending: a Trigger has not been served yet.
	pending bool
	// ran: at least one run happened; lastStart/lastEnd are valid.
	ran       bool
	lastStart time.Time
	lastEnd   time.Time
	// failed: the last run returned an error and must be retried.
	failed bool
	// failures counts consecutive failed runs (for the backoff).
	failures int
	// loopStart is when Run began, the base of the first MaxInterval.
	loopStart time.Time
}

// retryDelay is the wait after the last failure: RetryInterval, doubled
// for each further consecutive failure up to MaxRetryInterval.
func (s *schedule) retryDelay() time.Duration {
	d := s.cfg.RetryInterval
	for i := 1; i < s.failures && d < s.cfg.MaxRetryInterval; i++ {
		d *= 2
	}
	if s.cfg.MaxRetryInterval > s.cfg.RetryInterval && d > s.cfg.MaxRetryInterval {
		d = s.cfg.MaxRetryInterval
	}
	return d
}

// next returns when the next run is due. ok is false when nothing is due
// ever (no trigger, no failure, no MaxInterval).
func (s *schedule) next() (at time.Time, ok bool) {
	consider := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if s.pending {
		consider(s.loopStart) // as soon as allowed; the gate below moves it
	}
	if s.failed {
		consider(s.lastEnd.Add(s.retryDelay()))
	}
	if s.cfg.MaxInterval > 0 {
		base := s.loopStart
		if s.ran {
			base = s.lastEnd
		}
		consider(base.Add(s.cfg.MaxInterval))
	}
	if ok && s.ran && s.cfg.MinInterval > 0 {
		if gate := s.lastStart.Add(s.cfg.MinInterval); at.Before(gate) {
			at = gate
		}
	}
	return at, ok
}

// Run loops, calling fn when it is due, until ctx ends; then it returns nil
// (a run in progress is given the same ctx and is waited for). The first
// run happens at the first Trigger (including one made before Run) or after
// MaxInterval. Run must not be called twice at the same time.
func (r *Runner) Run(ctx context.Context) error {
	c := r.cfg.Clock
	log := r.cfg.Logger.WithValues("runner", r.name)
	s := schedule{cfg: r.cfg, loopStart: c.Now()}

	for {
		if ctx.Err() != nil {
			return nil
		}
		// Absorb a trigger that is already waiting, so that a run that is
		// due anyway also serves it.
		select {
		case <-r.trigger:
			s.pending = true
		default:
		}

		now := c.Now()
		at, ok := s.next()
		if ok && !at.After(now) {
			r.runOnce(ctx, log, &s)
			continue
		}

		var timer clock.Timer
		var timerC <-chan time.Time
		var wakeAt time.Time
		if ok {
			timer = c.NewTimer(at.Sub(now))
			timerC = timer.C()
			wakeAt = at
			log.V(4).Info("Waiting", "until", at, "pending", s.pending, "retry", s.failed)
		}
		if r.idle != nil {
			r.idle <- idleState{wakeAt: wakeAt}
		}
		select {
		case <-ctx.Done():
		case <-r.trigger:
			s.pending = true
		case <-timerC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// runOnce calls fn and records the outcome in s.
func (r *Runner) runOnce(ctx context.Context, log logr.Logger, s *schedule) {
	c := r.cfg.Clock
	s.pending = false
	start := c.Now()
	err := r.fn(ctx)
	if errors.Is(err, ErrNotRun) {
		return // the schedule stays as if fn had not been called
	}
	s.lastStart = start
	s.lastEnd = c.Now()
	s.ran = true
	s.failed = err != nil
	if err == nil {
		s.failures = 0
		return
	}
	s.failures++
	if ctx.Err() == nil {
		log.Error(err, "Run failed; will retry", "after", s.retryDelay(), "consecutiveFailures", s.failures)
	}
}
