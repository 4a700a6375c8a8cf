//go:build linux

package nftkernel_test

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftkernel"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// TestNewInterfaces: in a namespace of the test's own, NewInterfaces
// fills every interface a Proxier drives over the kernel, a Proxier takes
// them and syncs, and the drivers read what it wrote: the table, its
// chains, the generation its transactions moved.
func TestNewInterfaces(t *testing.T) {
	netnstest.InFreshNetns(t, func() {
		ifs, err := nftkernel.NewInterfaces(v1.IPv4Protocol)
		var verr *nftables.VersionError
		if errors.As(err, &verr) {
			t.Skipf("host below the nftables mode's requirements: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if ifs.NFTables == nil || ifs.Comments == nil || ifs.Generation == nil || ifs.Netlink == nil || ifs.NFTVersion == "" {
			t.Fatalf("NewInterfaces = %+v", ifs)
		}
		ctx := context.Background()
		if ok, err := ifs.Comments.TableExists(ctx); err != nil || ok {
			t.Fatalf("TableExists before any sync = %v, %v; want false", ok, err)
		}
		gen, err := ifs.Generation.Generation()
		if err != nil {
			t.Fatal(err)
		}
		p, err := nftables.NewProxier(nftables.Config{Common: engine.Common{NodeName: "node-a"}}, ifs)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.OnServiceSynced()
		p.OnEndpointSlicesSynced()
		if err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, err := ifs.Comments.TableExists(ctx); err != nil || !ok {
			t.Fatalf("TableExists after a sync = %v, %v; want true", ok, err)
		}
		chains, err := ifs.Comments.ListChainNames(ctx)
		if err != nil || len(chains) == 0 {
			t.Fatalf("ListChainNames after a sync = %v, %v", chains, err)
		}
		if after, err := ifs.Generation.Generation(); err != nil || after == gen {
			t.Fatalf("generation %d before the sync, %d (%v) after; want it moved", gen, after, err)
		}
	})
}
