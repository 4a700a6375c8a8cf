//go:build linux

package nftables_test

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// coldStart deletes the table on both sides of tw, starts a new engine on
// each (the nft-only one and the netlink one, with cfg) fed objs, and
// returns the netlink batches the netlink side's first (full) sync sent
// once both tables compare equal; then a restart over each table must
// write nothing and change nothing.
func (tw *twin) coldStart(name string, cfg nftables.Config, objs proxytest.Objects) int64 {
	tw.t.Helper()
	var lists [2]string
	var batches int64
	start := func(i int) *nftables.Proxier {
		p, err := nftables.NewProxier(cfg, tw.ifs[i])
		if err != nil {
			tw.t.Fatal(err)
		}
		f := proxytest.NewFeeder(p)
		if err := f.Apply(objs); err != nil {
			tw.t.Fatal(err)
		}
		f.Synced()
		return p
	}
	for i := range tw.p {
		tw.enter(i)
		_ = exec.Command("nft", "delete", "table", string(nftables.Family(tw.fam)), nftables.TableName).Run()
		before := tw.nl.batches.Load()
		p := start(i)
		if out := mustSync(tw.t, p); !out.Full {
			tw.t.Fatalf("%s: engine %d: the first sync was not full", name, i)
		}
		if i == 1 {
			batches = tw.nl.batches.Load() - before
		}
		if n := nftables.ArenasInUse(p); n != 0 {
			tw.t.Errorf("%s: engine %d: %d bytes of netlink arenas not given back after the cold start", name, i, n)
		}
		lists[i] = tw.list(i)
	}
	if lists[0] != lists[1] {
		tw.t.Fatalf("%s: the cold start over netlink differs from nft's:\n%s", name, listingDiff(lists[0], lists[1]))
	}
	for i := range tw.p {
		tw.enter(i)
		if w := mustSync(tw.t, start(i)).Result.Writes; w != 0 {
			tw.t.Errorf("%s: engine %d: a restart over the cold-started table wrote %d operations", name, i, w)
		}
		if after := tw.list(i); after != lists[i] {
			tw.t.Errorf("%s: engine %d: the restart changed the table:\n%s", name, i, listingDiff(lists[i], after))
		}
	}
	return batches
}

// refusedChunk cold-starts objs on the netlink side of tw (after a
// coldStart of the same objs) with its second batch refused by the
// kernel: that chunk is written again through nft at once, so the sync
// succeeds with the table nft alone writes, the refusal is counted, and
// the later chunks still go over netlink.
func refusedChunk(tw *twin, cfg nftables.Config, objs proxytest.Objects) {
	t := tw.t
	t.Helper()
	want := tw.list(0)
	tw.enter(1)
	_ = exec.Command("nft", "delete", "table", string(nftables.Family(tw.fam)), nftables.TableName).Run()
	p, err := nftables.NewProxier(cfg, tw.ifs[1])
	if err != nil {
		t.Fatal(err)
	}
	f := proxytest.NewFeeder(p)
	if err := f.Apply(objs); err != nil {
		t.Fatal(err)
	}
	f.Synced()
	start := tw.nl.batches.Load()
	tw.nl.failAt = start + 2
	defer func() { tw.nl.failAt = 0 }()
	if out := mustSync(t, p); !out.Full {
		t.Error("the cold start was not full")
	}
	if st := nftables.NetlinkStatsOf(p); st.Refused != 1 || st.ToolTook != 1 || !st.Active {
		t.Errorf("after a refused chunk: %+v, want 1 refused, taken by nft, the writer still on", st)
	}
	if n := tw.nl.batches.Load() - start; n < 3 {
		t.Errorf("%d batches sent; want the chunks after the refused one over netlink too", n)
	}
	if got := tw.list(1); got != want {
		t.Errorf("after the refused chunk written through nft, the table differs from nft's:\n%s", listingDiff(want, got))
	}
}

// flushedRepair flushes the table (every chain's rules, "nft flush
// table") on both sides of tw, after a coldStart of objs, and starts a new
// engine on each over it: both repair it to the same table. It returns the
// netlink batches of the netlink side's repair.
func flushedRepair(tw *twin, cfg nftables.Config, objs proxytest.Objects) int64 {
	t := tw.t
	t.Helper()
	var lists [2]string
	var batches int64
	for i := range tw.p {
		tw.enter(i)
		nft(t, "flush", "table", string(nftables.Family(tw.fam)), nftables.TableName)
		p, err := nftables.NewProxier(cfg, tw.ifs[i])
		if err != nil {
			t.Fatal(err)
		}
		f := proxytest.NewFeeder(p)
		if err := f.Apply(objs); err != nil {
			t.Fatal(err)
		}
		f.Synced()
		before := tw.nl.batches.Load()
		if w := mustSync(t, p).Result.Writes; w == 0 {
			t.Errorf("engine %d: the repair of a flushed table wrote nothing", i)
		}
		batches += tw.nl.batches.Load() - before
		lists[i] = tw.list(i)
	}
	if lists[0] != lists[1] {
		t.Fatalf("the repair of a flushed table over netlink differs from nft's:\n%s", listingDiff(lists[0], lists[1]))
	}
	return batches
}

// TestKernelNetlinkColdStart: a cold start (the first full sync into an
// empty table) whose service chunks go over netlink leaves exactly the
// table a cold start through nft alone leaves, for the golden table's
// services (and UDP and SCTP ports) cut into chunks of a few services, and
// for the objects of every step of the conformance table; a restart over
// either writes nothing; a refused batch is written through nft within
// the same sync (refusedChunk); a table flushed by hand is repaired
// to the same table both ways, its services over netlink (flushedRepair).
func TestKernelNetlinkColdStart(t *testing.T) {
	for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		topo := proxytest.DefaultTopology(fam)
		t.Run(string(fam)+"/forms", func(t *testing.T) {
			cfg := conformanceConfig(topo, proxytest.Options{})
			cfg.MaxTransactionOps = 20
			withTwin(t, fam, cfg, func(tw *twin) {
				if n := tw.coldStart("forms", cfg, formsObjects(topo)); n < 2 {
					t.Errorf("the cold start sent %d netlink batches; want the services in several", n)
				}
				refusedChunk(tw, cfg, formsObjects(topo))
				if n := flushedRepair(tw, cfg, formsObjects(topo)); n < 2 {
					t.Errorf("the repair of a flushed table sent %d netlink batches; want the services in several", n)
				}
				if fam == v1.IPv4Protocol {
					svcs, slices := goldenObjects(topo)
					if n := tw.coldStart("golden", cfg, proxytest.Objects{Services: svcs, EndpointSlices: slices}); n < 2 {
						t.Errorf("the golden cold start sent %d netlink batches; want several", n)
					}
				}
			})
		})
		groups := map[proxytest.Options][]proxytest.Scenario{}
		for _, sc := range proxytest.Scenarios(topo) {
			groups[sc.Options] = append(groups[sc.Options], sc)
		}
		for opts, scs := range groups {
			t.Run(fmt.Sprintf("%s/conformance/masqueradeAll=%v", fam, opts.MasqueradeAll), func(t *testing.T) {
				cfg := conformanceConfig(topo, opts)
				withTwin(t, fam, cfg, func(tw *twin) {
					var total int64
					for _, sc := range scs {
						for _, st := range sc.Steps {
							start := time.Now()
							total += tw.coldStart(sc.Name+"/"+st.Name, cfg, st.Objects)
							t.Logf("%s/%s: %v", sc.Name, st.Name, time.Since(start).Round(time.Millisecond))
						}
					}
					if total == 0 {
						t.Error("no conformance cold start went over netlink")
					}
				})
			})
		}
	}
}
