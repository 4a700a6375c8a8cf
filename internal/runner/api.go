// Package runner is the bounded-frequency runner behind every engine's Run.
package runner

// API SKELETON (lead). The sources helper implements it; signatures are the contract.
//
//   type Config struct {
//       // MinInterval: runs are at least this far apart (0: no limit).
//       MinInterval time.Duration
//       // MaxInterval: a run happens at least this often even with no trigger (0: never).
//       MaxInterval time.Duration
//       // RetryInterval: after a failed run, retry after this long (0: MinInterval, or 1s if that is 0).
//       RetryInterval time.Duration
//       Clock clock.WithTicker // k8s.io/utils/clock; nil: real clock
//       Logger logr.Logger
//   }
//   func New(name string, fn func(ctx context.Context) error, cfg Config) *Runner
//   func (r *Runner) Run(ctx context.Context) error   // loops until ctx ends; returns ctx.Err()? no: returns nil on ctx end
//   func (r *Runner) Trigger()                         // ask for a run soon (coalesced, never blocks)
