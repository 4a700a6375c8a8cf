package ipvstest

import (
	"maps"
	"sync"
)

// faults counts calls per operation and injects errors. Every fake embeds one.
type faults struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]*failure
}

type failure struct {
	err   error
	count int // <0: forever
	after int // calls to let through first
}

func (f *faults) hit(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = make(map[string]int)
	}
	f.calls[op]++
	fl := f.fail[op]
	if fl == nil {
		fl = f.fail["*"]
	}
	if fl == nil {
		return nil
	}
	if fl.after > 0 {
		fl.after--
		return nil
	}
	if fl.count == 0 {
		return nil
	}
	if fl.count > 0 {
		fl.count--
	}
	return fl.err
}

// FailOn makes the next count calls of op fail with err (count < 0: every
// call until Heal). op is a method name ("AddVirtualServer") or "*" for
// every mutating or listing method of the fake. The failed call changes
// nothing.
func (f *faults) FailOn(op string, count int, err error) {
	f.FailAfter(op, 0, count, err)
}

// FailAfter is FailOn after letting the first `after` calls through.
func (f *faults) FailAfter(op string, after, count int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = make(map[string]*failure)
	}
	f.fail[op] = &failure{err: err, count: count, after: after}
}

// Heal removes every injected failure.
func (f *faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = nil
}

// Calls returns how often each method was called (failed calls included).
func (f *faults) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls)
}

// ResetCalls zeroes the call counters.
func (f *faults) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// Mutations is the number of calls to methods that change state (failed
// ones included), named in mutating.
func (f *faults) countOf(names ...string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range names {
		n += f.calls[m]
	}
	return n
}
