// Package runner is the bounded-frequency runner behind every engine's Run
// (through proxy/engine's Base), exported for anyone who writes an engine of
// their own on package changetracker.
//
// A Runner calls one function (an engine's sync) from a single goroutine,
// so the function never runs concurrently with itself, and guarantees:
//
//   - Trigger never blocks. Any number of Triggers before the next run
//     starts collapse into that one run; a Trigger that arrives while the
//     function is running causes exactly one more run after it.
//   - Two runs never start less than Config.MinInterval apart; a Trigger
//     that comes too early is served as soon as the interval has passed.
//   - With Config.MaxInterval set, a run happens at least MaxInterval after
//     the previous run ended (or after Run started), triggered or not.
//   - A run that returns an error is retried Config.RetryInterval after it
//     ended (still respecting MinInterval), until a run succeeds; with
//     Config.MaxRetryInterval set, each consecutive failure doubles that
//     delay up to the cap (exponential backoff).
//   - Run returns nil once its context ends; a run in progress sees the
//     same context and is waited for.
//
// All timing goes through an injectable k8s.io/utils/clock, so tests drive
// it with a fake clock instead of sleeping.
package runner
