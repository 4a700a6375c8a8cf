//go:build linux

package nftables_test

import (
	"context"
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
)

// TestDryRunIsTheColdStart: the dry run's transaction, loaded into an
// empty table, makes the table a cold start writes, hairpin-connections'
// elements of local endpoints included.
func TestDryRunIsTheColdStart(t *testing.T) {
	c := makeCluster(20, 3)
	for _, sl := range c.slices[:5] {
		sl.Endpoints[0].NodeName = ptr.To("node-a") // local endpoints
	}
	fakes := nftablestest.NewFakes("IPv4")
	p := newTestProxier(t, fakes, testConfig())
	defer p.Close()
	c.feed(p)
	mustSync(t, p)
	plan, err := p.DryRun(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fromPlan := knftables.NewFake(knftables.IPv4Family, nftables.TableName)
	if err := fromPlan.ParseDump(plan); err != nil {
		t.Fatalf("loading the dry run: %v", err)
	}
	if got, want := fromPlan.Dump(), fakes.NFTables.Dump(); got != want {
		t.Errorf("the dry run's table differs from the cold start's:\ndry run:\n%s\ncold start:\n%s", got, want)
	}
}
