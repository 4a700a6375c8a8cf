//go:build linux

package nftables_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
)

// freshDump is the table a new proxier writes for c.
func freshDump(t *testing.T, c *cluster) string {
	t.Helper()
	fresh := nftablestest.NewFakes(v1.IPv4Protocol)
	q := newTestProxier(t, fresh, testConfig())
	defer q.Close()
	c.feed(q)
	mustSync(t, q)
	return fresh.Dump()
}

// syncedCluster is a proxier over fakes that synced n services of eps
// endpoints.
func syncedCluster(t *testing.T, n, eps int) (*nftablestest.Fakes, *cluster, *nftables.Proxier) {
	t.Helper()
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	c := makeCluster(n, eps)
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)
	return fakes, c, p
}

// TestEndpointReplacedAsElements: replacing one endpoint of a service
// that dispatches through an endpoint map writes elements of that map
// only, each key deleted and added again with its new value (the
// endpoints keep their sorted order, so the keys after the replaced one
// may shift): no rule, so the kernel does not validate the table
// (endpoint_maps.go).
func TestEndpointReplacedAsElements(t *testing.T) {
	fakes, c, p := syncedCluster(t, 20, 3)
	defer p.Close()

	next := makeSlice(2, 3, 0)
	next.Endpoints[1].Addresses = []string{"10.128.2.200"}
	p.OnEndpointSliceUpdate(c.slices[2], next)
	c.slices[2] = next
	if out := mustSync(t, p); out.Full {
		t.Fatal("the sync was full")
	}
	tx := strings.Split(strings.TrimSpace(fakes.NFTables.LastTransaction.String()), "\n")
	del := regexp.MustCompile(`^delete element ip kube-proxy (service-endpoints-tcp-\d\d) \{ (\d+) \}$`)
	add := regexp.MustCompile(`^add element ip kube-proxy (service-endpoints-tcp-\d\d) \{ (\d+) : (10\.128\.2\.\d+) \. 8080 \}$`)
	deleted := map[string]bool{}
	var added []string
	for _, l := range tx {
		if m := del.FindStringSubmatch(l); m != nil && len(added) == 0 {
			deleted[m[1]+" "+m[2]] = true
		} else if m := add.FindStringSubmatch(l); m != nil && deleted[m[1]+" "+m[2]] {
			added = append(added, m[3])
		} else {
			t.Fatalf("not an endpoint-map replacement: %q in\n%s", l, strings.Join(tx, "\n"))
		}
	}
	if len(added) != len(deleted) || !slices.Contains(added, "10.128.2.200") || len(added) > 2 {
		t.Errorf("replacement of one endpoint:\n%s", strings.Join(tx, "\n"))
	}
	if got, want := withoutEmptyChains(fakes.NFTables), freshDump(t, c); got != want {
		t.Errorf("the table differs from a fresh one:\n got: %s\nwant: %s", got, want)
	}
}

// TestEndpointCountChanges: a service going from 3 endpoints to 4 (its
// rule's modulus changes, an element is added), to 1 (a plain "dnat to",
// its elements deleted) and back to 3 ends with the table a fresh
// proxier writes each time.
func TestEndpointCountChanges(t *testing.T) {
	fakes, c, p := syncedCluster(t, 20, 3)
	defer p.Close()
	chain := regexp.MustCompile(`(?m)^add rule ip kube-proxy service-[A-Z0-9]+-ns/svc-4/tcp/p80 (.*)$`)
	for _, tc := range []struct {
		eps  int
		rule string
	}{{4, `^meta l4proto tcp dnat ip to numgen random mod 4 offset \d+ map @service-endpoints-tcp-\d\d comment "svcproxy-slot:\d+/\d+ svcproxy:`},
		{1, `^meta l4proto tcp dnat to 10\.128\.4\.1:8080 comment "svcproxy:`},
		{3, `^meta l4proto tcp dnat ip to numgen random mod 3 offset`}} {
		next := makeSlice(4, tc.eps, 0)
		p.OnEndpointSliceUpdate(c.slices[4], next)
		c.slices[4] = next
		mustSync(t, p)
		got := withoutEmptyChains(fakes.NFTables)
		if want := freshDump(t, c); got != want {
			t.Errorf("%d endpoints: the table differs from a fresh one:\n got: %s\nwant: %s", tc.eps, got, want)
		}
		m := chain.FindAllStringSubmatch(got, -1)
		if len(m) != 1 || !regexp.MustCompile(tc.rule).MatchString(m[0][1]) {
			t.Errorf("%d endpoints: the service chain holds %q", tc.eps, m)
		}
		if n := strings.Count(got, " : 10.128.4."); (tc.eps == 1) != (n == 0) || (tc.eps > 1 && n != tc.eps) {
			t.Errorf("%d endpoints: %d endpoint-map elements of the service", tc.eps, n)
		}
	}
}
