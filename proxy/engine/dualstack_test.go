package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	v1 "k8s.io/api/core/v1"
)

func TestDualStackSurface(t *testing.T) {
	mk := func(fam v1.IPFamily, r *recorder) *Base {
		b, err := New(Common{IPFamily: fam, Logger: testr.New(t)}, r.hooks())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r4, r6 := &recorder{}, &recorder{}
	v4, v6 := mk(v1.IPv4Protocol, r4), mk(v1.IPv6Protocol, r6)
	if _, err := NewDualStack(v6, v4); err == nil {
		t.Fatal("swapped families accepted")
	}
	d, err := NewDualStack(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	d.OnServiceSynced()
	d.OnEndpointSlicesSynced()
	if err := d.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	plan, err := d.DryRun(context.Background())
	if err != nil || !strings.Contains(plan, "# IPv4\nplan of dry-run# IPv6\nplan of dry-run") {
		t.Fatalf("DryRun = %q, %v", plan, err)
	}
	r6.fail = errors.New("boom")
	if err := d.Sync(context.Background()); err == nil {
		t.Fatal("the IPv6 failure was lost")
	}
	s := d.Stats()
	if s.Syncs != 4 || s.Failures != 1 || s.Last.Err == nil || s.Last.Family != v1.IPv6Protocol {
		t.Fatalf("Stats = %+v; want 4 syncs, the IPv6 failure as Last", s)
	}
	if err := d.Close(); err != nil || r4.closed != 1 || r6.closed != 1 {
		t.Fatalf("Close = %v; closed %d/%d", err, r4.closed, r6.closed)
	}
}
