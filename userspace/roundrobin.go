package userspace

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/proxy"
)

// BalancerKey names one endpoint set a proxy socket forwards to: a service
// port's cluster set (every usable endpoint) or, when a traffic policy is
// Local, its local set (this node's endpoints).
type BalancerKey struct {
	proxy.ServicePortName
	Local bool
}

func (k BalancerKey) String() string {
	if k.Local {
		return k.ServicePortName.String() + "/" + string(k.Protocol) + " (local)"
	}
	return k.ServicePortName.String() + "/" + string(k.Protocol)
}

// Affinity is a service port's session affinity.
type Affinity struct {
	// ClientIP: a client address keeps its endpoint while it stays in the
	// set and the client was seen within Timeout.
	ClientIP bool
	Timeout  time.Duration
}

// LoadBalancer chooses the endpoint of each new connection or UDP flow.
// Implementations are safe for concurrent use.
type LoadBalancer interface {
	// Update installs or replaces the endpoint set and affinity of key.
	// Affinity records pointing at endpoints no longer in the set are dropped.
	Update(key BalancerKey, endpoints []netip.AddrPort, affinity Affinity)
	// Delete forgets key.
	Delete(key BalancerKey)
	// Next returns the endpoint for a new connection from client.
	// resetAffinity asks for a fresh choice (the sticky endpoint failed).
	// Errors: ErrUnknownService, ErrNoEndpoints.
	Next(key BalancerKey, client netip.Addr, resetAffinity bool) (netip.AddrPort, error)
	// Endpoints returns a sorted copy of key's current set (nil if unknown).
	Endpoints(key BalancerKey) []netip.AddrPort
	// Affinity returns key's affinity and whether key is known.
	Affinity(key BalancerKey) (Affinity, bool)
	// CleanupStale drops expired affinity records.
	CleanupStale()
}

// RoundRobin is the default LoadBalancer: round robin over a set shuffled
// whenever it changes (so that proxies on different nodes do not all start
// at the same endpoint), with ClientIP affinity.
type RoundRobin struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	state map[BalancerKey]*rrState
	// sticky holds the keys with ClientIP affinity, so that CleanupStale
	// does not walk every service.
	sticky map[BalancerKey]*rrState
}

type rrState struct {
	endpoints []netip.AddrPort // shuffled order used for picking
	index     int
	affinity  Affinity
	sticky    map[netip.Addr]*stickyEntry
}

type stickyEntry struct {
	endpoint netip.AddrPort
	lastUsed time.Time
}

var _ LoadBalancer = (*RoundRobin)(nil)

// NewRoundRobin returns an empty balancer; clk may be nil (real clock).
func NewRoundRobin(clk clock.PassiveClock) *RoundRobin {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &RoundRobin{clock: clk, state: map[BalancerKey]*rrState{}, sticky: map[BalancerKey]*rrState{}}
}

// Update implements LoadBalancer.
func (rr *RoundRobin) Update(key BalancerKey, endpoints []netip.AddrPort, affinity Affinity) {
	sorted := slices.Clone(endpoints)
	slices.SortFunc(sorted, netip.AddrPort.Compare)
	sorted = slices.Compact(sorted)

	rr.mu.Lock()
	defer rr.mu.Unlock()
	st := rr.state[key]
	if st == nil {
		st = &rrState{sticky: map[netip.Addr]*stickyEntry{}}
		rr.state[key] = st
	}
	if !affinity.ClientIP || affinity != st.affinity {
		clear(st.sticky)
	}
	st.affinity = affinity
	if affinity.ClientIP {
		rr.sticky[key] = st
	} else {
		delete(rr.sticky, key)
	}
	current := slices.Clone(st.endpoints)
	slices.SortFunc(current, netip.AddrPort.Compare)
	if slices.Equal(current, sorted) {
		return
	}
	rand.Shuffle(len(sorted), func(i, j int) { sorted[i], sorted[j] = sorted[j], sorted[i] })
	st.endpoints = sorted
	st.index = 0
	for client, e := range st.sticky {
		if !slices.Contains(sorted, e.endpoint) {
			delete(st.sticky, client)
		}
	}
}

// Delete implements LoadBalancer.
func (rr *RoundRobin) Delete(key BalancerKey) {
	rr.mu.Lock()
	delete(rr.state, key)
	delete(rr.sticky, key)
	rr.mu.Unlock()
}

// Next implements LoadBalancer.
func (rr *RoundRobin) Next(key BalancerKey, client netip.Addr, resetAffinity bool) (netip.AddrPort, error) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	st := rr.state[key]
	if st == nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %s", ErrUnknownService, key)
	}
	if len(st.endpoints) == 0 {
		return netip.AddrPort{}, fmt.Errorf("%w: %s", ErrNoEndpoints, key)
	}
	sticky := st.affinity.ClientIP && client.IsValid()
	now := rr.clock.Now()
	if sticky && !resetAffinity {
		if e := st.sticky[client]; e != nil {
			if now.Sub(e.lastUsed) < st.affinity.Timeout {
				e.lastUsed = now
				return e.endpoint, nil
			}
			delete(st.sticky, client)
		}
	}
	ep := st.endpoints[st.index%len(st.endpoints)]
	st.index = (st.index + 1) % len(st.endpoints)
	if sticky {
		st.sticky[client] = &stickyEntry{endpoint: ep, lastUsed: now}
	}
	return ep, nil
}

// Endpoints implements LoadBalancer.
func (rr *RoundRobin) Endpoints(key BalancerKey) []netip.AddrPort {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	st := rr.state[key]
	if st == nil {
		return nil
	}
	out := slices.Clone(st.endpoints)
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// Affinity implements LoadBalancer.
func (rr *RoundRobin) Affinity(key BalancerKey) (Affinity, bool) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	st := rr.state[key]
	if st == nil {
		return Affinity{}, false
	}
	return st.affinity, true
}

// CleanupStale implements LoadBalancer.
func (rr *RoundRobin) CleanupStale() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	now := rr.clock.Now()
	for _, st := range rr.sticky {
		for client, e := range st.sticky {
			if now.Sub(e.lastUsed) >= st.affinity.Timeout {
				delete(st.sticky, client)
			}
		}
	}
}

// stickyCount is for tests.
func (rr *RoundRobin) stickyCount(key BalancerKey) int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if st := rr.state[key]; st != nil {
		return len(st.sticky)
	}
	return 0
}
