package changetracker

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
)

// TestOtherFamilyLoggedOnceAndCounted: a service whose cluster IPs are all
// of the other family is skipped with one V(2) line per service (not one
// per update), counted while it stays so, and forgotten once it is
// served or deleted.
func TestOtherFamilyLoggedOnceAndCounted(t *testing.T) {
	var lines []string
	log := funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 2})
	tr := New(Config{IPFamily: v1.IPv4Protocol, Logger: log})
	v6 := makeService("ns", "v6only", []string{"fd00::1"}, []int32{80}, v1.ProtocolTCP)
	v6b := makeService("ns", "v6only", []string{"fd00::1"}, []int32{80, 81}, v1.ProtocolTCP)
	dual := makeService("ns", "dual", []string{"10.0.0.2", "fd00::2"}, []int32{80}, v1.ProtocolTCP)
	headless := makeService("ns", "headless", []string{v1.ClusterIPNone}, []int32{80}, v1.ProtocolTCP)

	tr.OnServiceAdd(v6)
	tr.OnServiceUpdate(v6, v6b)
	tr.OnServiceAdd(dual)
	tr.OnServiceAdd(headless)
	if n := tr.OtherFamily(); n != 1 {
		t.Errorf("OtherFamily() = %d, want 1", n)
	}
	count := func() int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "none of its cluster IPs is of this proxy's IP family") {
				n++
				if !strings.Contains(l, `"service"={"name":"v6only","namespace":"ns"}`) && !strings.Contains(l, "v6only") {
					t.Errorf("line does not name the service: %s", l)
				}
			}
		}
		return n
	}
	if n := count(); n != 1 {
		t.Errorf("%d lines for the IPv6-only service, want 1:\n%s", n, strings.Join(lines, "\n"))
	}
	if u := tr.Update(); len(u.Services) != 1 {
		t.Errorf("services in the map: %d, want 1 (the dual-stack one)", len(u.Services))
	}

	// Deleted, then added again: counted and logged again.
	tr.OnServiceDelete(v6b)
	if n := tr.OtherFamily(); n != 0 {
		t.Errorf("OtherFamily() after delete = %d, want 0", n)
	}
	tr.OnServiceAdd(v6)
	if n := count(); n != 2 {
		t.Errorf("%d lines after delete and re-add, want 2", n)
	}
	// Gains an IPv4 cluster IP: served, no longer counted.
	tr.OnServiceUpdate(v6, makeService("ns", "v6only", []string{"fd00::1", "10.0.0.1"}, []int32{80}, v1.ProtocolTCP))
	if n := tr.OtherFamily(); n != 0 {
		t.Errorf("OtherFamily() once served = %d, want 0", n)
	}
}
