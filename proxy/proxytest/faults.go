package proxytest

import (
	"maps"
	"sync"
)

// Faults is the fault-injection and call-counting vocabulary every fake of
// every …test kit shares (each fake embeds one): the same verbs inject a
// failed iptables-restore, a failed IPVS call, a failed nft transaction or
// a failed HNS call. Operations are named by the fake's method
// ("Restore", "AddVirtualServer", "CreateLoadBalancer"); "*" matches every
// operation a fake counts. A failed call changes nothing. The zero value
// is ready to use and safe for concurrent use.
type Faults struct {
	mu    sync.Mutex
	calls map[string]int
	fail  map[string]*failure
}

type failure struct {
	err   error
	count int // <0: forever
	after int // calls to let through first
}

// Hit counts a call of op and returns the error injected for it, if any.
// Fakes call it first thing in each counted method.
func (f *Faults) Hit(op string) error {
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
// call until Heal).
func (f *Faults) FailOn(op string, count int, err error) {
	f.FailAfter(op, 0, count, err)
}

// FailAfter is FailOn after letting the first `after` calls through.
func (f *Faults) FailAfter(op string, after, count int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = make(map[string]*failure)
	}
	f.fail[op] = &failure{err: err, count: count, after: after}
}

// Heal removes every injected failure.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = nil
}

// Calls returns how often each operation was called (failed calls included).
func (f *Faults) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls)
}

// CallsOf returns the total calls of the named operations.
func (f *Faults) CallsOf(ops ...string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, op := range ops {
		n += f.calls[op]
	}
	return n
}

// ResetCalls zeroes the call counters.
func (f *Faults) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}
