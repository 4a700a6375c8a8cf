//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/nftablestest"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// fakeNetlink is a NetlinkWriter over nothing: it refuses every batch
// (refuse) or says it committed it without writing anything (the kernel
// changed behind the writer, as far as a read-back can tell).
type fakeNetlink struct {
	refuse bool
	calls  int
}

func (f *fakeNetlink) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	f.calls++
	if f.refuse {
		return &nftables.BatchError{Index: -1, Errno: unix.EINVAL}
	}
	return nil
}

// netlinkProxier is an nftables Proxier over fakes with nl as its netlink
// writer.
func netlinkProxier(t *testing.T, cfg nftables.Config, nl nftables.NetlinkWriter, version string) (*nftables.Proxier, *nftablestest.Fakes) {
	t.Helper()
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	ifs := fakes.Interfaces()
	ifs.Netlink, ifs.NFTVersion = nl, version
	p, err := nftables.NewProxier(cfg, ifs)
	if err != nil {
		t.Fatal(err)
	}
	return p, fakes
}

// referenceDump is what an nft-only Proxier writes for c.
func referenceDump(t *testing.T, c *cluster) string {
	t.Helper()
	fakes := nftablestest.NewFakes(v1.IPv4Protocol)
	p := newTestProxier(t, fakes, testConfig())
	c.feed(p)
	mustSync(t, p)
	return withoutEmptyChains(fakes.NFTables)
}

// Each switch keeps the netlink writer unused on every path (full and
// partial syncs): Config.NFTOnly, SVCPROXY_NFTABLES_NETLINK=0, and an nft
// outside the verified versions; "1" turns it on outside them.
func TestNetlinkSwitches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nftOnly bool
		env     string
		version string
		want    bool
	}{
		{"default", false, "", "", true},
		{"verified nft", false, "", "1.0.6", true},
		{"NFTOnly", true, "", "", false},
		{"NFTOnly beats the env", true, "1", "", false},
		{"env 0", false, "0", "", false},
		{"env 0, verified nft", false, "0", "1.0.6", false},
		{"nft outside the verified versions", false, "", "1.2.0", false},
		{"env 1 outside them", false, "1", "1.2.0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(fastpath.EnvNFTablesNetlink, tc.env)
			if tc.version != "" && tc.want && tc.env == "" && fastpath.KernelVersion().Less(fastpath.NFTablesNetlink.KernelMin) {
				t.Skipf("this kernel (%s) is below the verified ones", fastpath.KernelVersion())
			}
			cfg := testConfig()
			cfg.NFTOnly = tc.nftOnly
			nl := &fakeNetlink{refuse: true}
			p, _ := netlinkProxier(t, cfg, nl, tc.version)
			if got := nftables.NetlinkStatsOf(p).Active; got != tc.want {
				t.Fatalf("Active = %v, want %v", got, tc.want)
			}
			c := makeCluster(20, 2)
			c.feed(p)
			mustSync(t, p) // full: fixed part through nft, services after it
			p.OnEndpointSliceUpdate(c.slices[3], makeSlice(3, 2, 1))
			mustSync(t, p) // partial
			if used := nl.calls > 0; used != tc.want {
				t.Errorf("netlink writer called %d times, want used = %v", nl.calls, tc.want)
			}
		})
	}
}

// A batch the kernel refuses is written through nft at once (the sync
// succeeds, the table is nft's); after three such batches the netlink
// writer is off for good, logged and counted.
func TestNetlinkRefusedFallsBackToNFT(t *testing.T) {
	t.Setenv(fastpath.EnvNFTablesNetlink, "")
	cfg := testConfig()
	m := metrics.New()
	cfg.Metrics = m
	nl := &fakeNetlink{refuse: true}
	p, fakes := netlinkProxier(t, cfg, nl, "")
	c := makeCluster(20, 2)
	c.feed(p)
	mustSync(t, p)
	st := nftables.NetlinkStatsOf(p)
	if nl.calls != 1 || st.Refused != 1 || st.ToolTook != 1 || !st.Active {
		t.Fatalf("after a refused cold-start batch: %d calls, %+v; want 1 refused, taken by nft, still active", nl.calls, st)
	}
	for i := 1; i <= 3; i++ {
		p.OnEndpointSliceUpdate(c.slices[i], makeSlice(i, 2, 1))
		c.slices[i] = makeSlice(i, 2, 1)
		mustSync(t, p)
	}
	st = nftables.NetlinkStatsOf(p)
	if nl.calls != 3 || st.Refused != 3 || st.Active || st.SwitchedOff != nftables.OffRefusals {
		t.Errorf("after three refusals nft took: %d calls, %+v; want the writer off (%s)", nl.calls, st, nftables.OffRefusals)
	}
	if got := testutil.ToFloat64(m.FastWriterSwitchedOffTotal.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink, nftables.OffRefusals)); got != 1 {
		t.Errorf("switched-off metric = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.FastWriterHandedToToolTotal.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink, "refused")); got != 3 {
		t.Errorf("handed-to-tool metric = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.FastWriterActive.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink)); got != 0 {
		t.Errorf("active metric = %v, want 0", got)
	}
	p.OnEndpointSliceUpdate(c.slices[5], makeSlice(5, 2, 1))
	c.slices[5] = makeSlice(5, 2, 1)
	mustSync(t, p)
	if nl.calls != 3 {
		t.Errorf("the writer was called after it was switched off (%d calls)", nl.calls)
	}
	if got, want := withoutEmptyChains(fakes.NFTables), referenceDump(t, c); got != want {
		t.Errorf("the table differs from nft's alone:\n%s\nwant:\n%s", got, want)
	}
}

// The first netlink batch is read back with nft's listing: a writer that
// said it committed what the table does not hold (the kernel changed
// behind it) fails the sync with ErrSelfCheck and is switched off; the
// next sync, a full one, writes the table through nft.
func TestNetlinkSelfCheck(t *testing.T) {
	t.Setenv(fastpath.EnvNFTablesNetlink, "")
	cfg := testConfig()
	m := metrics.New()
	cfg.Metrics = m
	nl := &fakeNetlink{}
	p, fakes := netlinkProxier(t, cfg, nl, "")
	c := makeCluster(20, 2)
	c.feed(p)
	err := p.Sync(context.Background())
	if !errors.Is(err, nftables.ErrSelfCheck) {
		t.Fatalf("sync over a writer that wrote nothing = %v, want ErrSelfCheck", err)
	}
	st := nftables.NetlinkStatsOf(p)
	if st.Active || st.SwitchedOff != nftables.OffSelfCheck || st.SelfChecks != 1 || st.SelfCheckFailures != 1 {
		t.Errorf("after a failed read-back: %+v, want the writer off by the self-check", st)
	}
	if got := testutil.ToFloat64(m.FastWriterSwitchedOffTotal.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink, nftables.OffSelfCheck)); got != 1 {
		t.Errorf("switched-off metric = %v, want 1", got)
	}
	if out := mustSync(t, p); !out.Full {
		t.Error("the sync after the failed read-back was not full")
	}
	if got, want := withoutEmptyChains(fakes.NFTables), referenceDump(t, c); got != want {
		t.Errorf("the table differs from nft's alone:\n%s\nwant:\n%s", got, want)
	}
}
