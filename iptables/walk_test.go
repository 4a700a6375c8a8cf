package iptables_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	. "github.com/svcproxy/svcproxy/iptables"
)

// walkServices is the universe of the state walk: each service slot can
// be absent or take any combination of a service variant and an endpoint
// variant.
const walkSlots = 6

var walkServiceVariants = []func(i int) *v1.Service{
	func(i int) *v1.Service { return svc("ns", name(i), cip(i)) },
	func(i int) *v1.Service { return svc("ns", name(i), cip(i), nodePort(int32(30000+i))) },
	func(i int) *v1.Service {
		return svc("ns", name(i), cip(i), loadBalancer(int32(30000+i), fmt.Sprintf("1.1.1.%d", i), "192.168.0.0/16"))
	},
	func(i int) *v1.Service {
		return svc("ns", name(i), cip(i), loadBalancer(int32(30000+i), fmt.Sprintf("1.1.1.%d", i)), etpLocal(int32(31000+i)))
	},
	func(i int) *v1.Service { return svc("ns", name(i), cip(i), itpLocal) },
	func(i int) *v1.Service {
		return svc("ns", name(i), cip(i), affinity(100), externalIPs(fmt.Sprintf("2.2.2.%d", i)))
	},
	func(i int) *v1.Service { return svc("ns", name(i), cip(i), udp, nodePort(int32(30000+i))) },
}

var walkEndpointVariants = []func(i int, proto v1.Protocol) *discovery.EndpointSlice{
	nil, // no slice
	func(i int, proto v1.Protocol) *discovery.EndpointSlice { return slice("ns", name(i), proto) },
	func(i int, proto v1.Protocol) *discovery.EndpointSlice {
		return slice("ns", name(i), proto, ep{ip: fmt.Sprintf("10.1.%d.1", i)})
	},
	func(i int, proto v1.Protocol) *discovery.EndpointSlice {
		return slice("ns", name(i), proto, ep{ip: fmt.Sprintf("10.1.%d.1", i)}, ep{ip: fmt.Sprintf("10.1.%d.2", i), node: testNode})
	},
	func(i int, proto v1.Protocol) *discovery.EndpointSlice {
		return slice("ns", name(i), proto, ep{ip: fmt.Sprintf("10.1.%d.3", i), node: testNode, terminating: true}, ep{ip: fmt.Sprintf("10.1.%d.4", i), terminating: true})
	},
	func(i int, proto v1.Protocol) *discovery.EndpointSlice {
		return slice("ns", name(i), proto, ep{ip: fmt.Sprintf("10.1.%d.5", i)}, ep{ip: fmt.Sprintf("10.1.%d.6", i)}, ep{ip: fmt.Sprintf("10.1.%d.7", i)})
	},
}

func name(i int) string { return fmt.Sprintf("s%d", i) }
func cip(i int) string  { return fmt.Sprintf("172.30.1.%d", i+1) }

// walkState: per slot, service variant (-1 absent) and endpoint variant.
type walkState [walkSlots][2]int

func (s walkState) objects() (svcs []*v1.Service, slices []*discovery.EndpointSlice) {
	for i, v := range s {
		var proto v1.Protocol = v1.ProtocolTCP
		if v[0] >= 0 {
			sv := walkServiceVariants[v[0]](i)
			proto = sv.Spec.Ports[0].Protocol
			svcs = append(svcs, sv)
		} else {
			svcs = append(svcs, nil)
		}
		if f := walkEndpointVariants[v[1]]; f != nil {
			slices = append(slices, f(i, proto))
		} else {
			slices = append(slices, nil)
		}
	}
	return svcs, slices
}

func randomWalkState(r *rand.Rand) walkState {
	var s walkState
	for i := range s {
		s[i][0] = r.IntN(len(walkServiceVariants)+1) - 1
		s[i][1] = r.IntN(len(walkEndpointVariants))
	}
	return s
}

// transition hands p the events that turn from into to.
func transition(p *Proxier, from, to walkState) {
	fs, fe := from.objects()
	ts, te := to.objects()
	for i := range walkSlots {
		switch {
		case fs[i] == nil && ts[i] != nil:
			p.OnServiceAdd(ts[i])
		case fs[i] != nil && ts[i] == nil:
			p.OnServiceDelete(fs[i])
		case fs[i] != nil:
			p.OnServiceUpdate(fs[i], ts[i])
		}
		switch {
		case fe[i] == nil && te[i] != nil:
			p.OnEndpointSliceAdd(te[i])
		case fe[i] != nil && te[i] == nil:
			p.OnEndpointSliceDelete(fe[i])
		case fe[i] != nil:
			p.OnEndpointSliceUpdate(fe[i], te[i])
		}
	}
}

// fullSyncDump is what a fresh proxier writes for s in one full sync.
func fullSyncDump(t *testing.T, s walkState) string {
	t.Helper()
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	transition(p, walkState{{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}}, s)
	mustSync(t, p)
	return normalizedDump(fake.Dump())
}

// TestStateWalk walks through random states in random order; after every
// step, the partial sync must leave exactly what a full sync from scratch
// writes for that state (the order of the per-service dispatch rules in
// the shared chains aside, which carries no meaning).
func TestStateWalk(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	cur := walkState{{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}}
	mustSync(t, p)
	partials := 0
	for step := range 80 {
		next := cur
		switch r.IntN(3) {
		case 0: // anything
			next = randomWalkState(r)
		default: // one slot changes, the common case
			i := r.IntN(walkSlots)
			if r.IntN(2) == 0 {
				next[i][0] = r.IntN(len(walkServiceVariants)+1) - 1
			} else {
				next[i][1] = r.IntN(len(walkEndpointVariants))
			}
		}
		transition(p, cur, next)
		fake.ResetStats()
		mustSync(t, p)
		if strings.Contains(string(fake.Stats().LastRestore), ":KUBE-SERVICES - [0:0]") {
			t.Fatalf("step %d: expected a partial sync, got a full one", step)
		}
		if fake.Stats().Restores > 0 {
			partials++
		}
		got := normalizedDump(fake.Dump())
		want := fullSyncDump(t, next)
		if got != want {
			t.Fatalf("step %d (%v -> %v): partial sync diverges from a full sync:\n%s\npartial restore was:\n%s",
				step, cur, next, lineDiff(want, got), fake.Stats().LastRestore)
		}
		cur = next
	}
	if partials < 20 {
		t.Errorf("only %d partial syncs wrote anything", partials)
	}
}
