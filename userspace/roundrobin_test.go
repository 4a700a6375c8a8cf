package userspace

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func aps(ss ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range ss {
		out = append(out, netip.MustParseAddrPort(s))
	}
	return out
}

func TestRoundRobinRotates(t *testing.T) {
	rr := NewRoundRobin(nil)
	key := BalancerKey{ServicePortName: spn("a", v1.ProtocolTCP)}
	if _, err := rr.Next(key, netip.Addr{}, false); !errors.Is(err, ErrUnknownService) {
		t.Fatalf("unknown key: got %v, want ErrUnknownService", err)
	}
	rr.Update(key, nil, Affinity{})
	if _, err := rr.Next(key, netip.Addr{}, false); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("empty key: got %v, want ErrNoEndpoints", err)
	}
	eps := aps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	rr.Update(key, eps, Affinity{})
	counts := map[netip.AddrPort]int{}
	for range 9 {
		ep, err := rr.Next(key, netip.MustParseAddr("1.1.1.1"), false)
		if err != nil {
			t.Fatal(err)
		}
		counts[ep]++
	}
	for _, ep := range eps {
		if counts[ep] != 3 {
			t.Errorf("endpoint %s chosen %d times out of 9, want 3 (%v)", ep, counts[ep], counts)
		}
	}
	if got := rr.Endpoints(key); !slices.Equal(got, eps) {
		t.Errorf("Endpoints = %v, want %v", got, eps)
	}
	rr.Delete(key)
	if got := rr.Endpoints(key); got != nil {
		t.Errorf("Endpoints after Delete = %v", got)
	}
}

func TestRoundRobinClientIPAffinity(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rr := NewRoundRobin(clk)
	key := BalancerKey{ServicePortName: spn("a", v1.ProtocolTCP)}
	eps := aps("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	rr.Update(key, eps, Affinity{ClientIP: true, Timeout: 10 * time.Second})
	c1, c2 := netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.2")

	first, _ := rr.Next(key, c1, false)
	other, _ := rr.Next(key, c2, false)
	if first == other {
		t.Fatalf("two clients got the same first endpoint %s; round robin should spread them", first)
	}
	for range 5 {
		clk.Step(5 * time.Second) // within the timeout, refreshed each time
		if ep, _ := rr.Next(key, c1, false); ep != first {
			t.Fatalf("sticky client moved from %s to %s", first, ep)
		}
	}
	// A reset (the sticky endpoint failed) picks anew and sticks to it.
	moved, _ := rr.Next(key, c1, true)
	if moved == first {
		t.Fatalf("reset kept %s", first)
	}
	if ep, _ := rr.Next(key, c1, false); ep != moved {
		t.Fatalf("after reset: got %s, want %s", ep, moved)
	}
	// Expiry.
	clk.Step(11 * time.Second)
	rr.CleanupStale()
	if n := rr.stickyCount(key); n != 0 {
		t.Fatalf("%d sticky entries after the timeout", n)
	}
	// Removing the sticky endpoint drops the record.
	got, _ := rr.Next(key, c1, false)
	var rest []netip.AddrPort
	for _, e := range eps {
		if e != got {
			rest = append(rest, e)
		}
	}
	rr.Update(key, rest, Affinity{ClientIP: true, Timeout: 10 * time.Second})
	if ep, _ := rr.Next(key, c1, false); ep == got {
		t.Fatalf("client still sent to removed endpoint %s", got)
	}
	// Turning affinity off forgets every record.
	rr.Update(key, rest, Affinity{})
	if n := rr.stickyCount(key); n != 0 {
		t.Fatalf("%d sticky entries with affinity off", n)
	}
	if a, ok := rr.Affinity(key); !ok || a.ClientIP {
		t.Fatalf("Affinity = %v, %v", a, ok)
	}
}

func TestRoundRobinUpdateKeepsPositionWhenUnchanged(t *testing.T) {
	rr := NewRoundRobin(nil)
	key := BalancerKey{ServicePortName: spn("a", v1.ProtocolTCP)}
	eps := aps("10.0.0.1:80", "10.0.0.2:80")
	rr.Update(key, eps, Affinity{})
	a, _ := rr.Next(key, netip.Addr{}, false)
	rr.Update(key, []netip.AddrPort{eps[1], eps[0], eps[1]}, Affinity{}) // same set, other order, duplicate
	b, _ := rr.Next(key, netip.Addr{}, false)
	if a == b {
		t.Fatalf("an unchanged update restarted the rotation (%s twice)", a)
	}
}
