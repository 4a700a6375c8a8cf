//go:build linux

package nftables_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/internal/fastpath"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/proxy/metrics"
)

// failingNetlink says it committed every batch (writing nothing), or
// refuses each (*BatchError: nft writes it), or fails each with a plain
// error (the sync fails).
type failingNetlink struct {
	calls          int
	refuse, broken bool
}

func (f *failingNetlink) WriteBatch(ctx context.Context, msgs []netlink.Message) error {
	f.calls++
	switch {
	case f.refuse:
		return &nftables.BatchError{Index: -1, Errno: unix.EINVAL}
	case f.broken:
		return errors.New("the socket went away")
	}
	return nil
}

// Every batch's arenas go back to the pool on every path of a chunked
// full sync (each chunk encoded while the one before is written): the
// kernel refusing batches (nft writes them; after three the writer is
// off, and the encodings begun meanwhile are dropped), the read-back
// failing the sync after the first batch, the writer failing. The path
// where every batch is taken is TestKernelNetlinkColdStart's.
func TestNetlinkArenasGoBack(t *testing.T) {
	t.Setenv(fastpath.EnvNFTablesNetlink, "")
	for _, tc := range []struct {
		name           string
		refuse, broken bool
		wantErr        error
	}{
		{"refused", true, false, nil},
		{"read-back differs", false, false, nftables.ErrSelfCheck},
		{"writer fails", false, true, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.MaxTransactionOps = 20
			m := metrics.New()
			cfg.Metrics = m
			nl := &failingNetlink{refuse: tc.refuse, broken: tc.broken}
			p, _ := netlinkProxier(t, cfg, nl, "")
			c := makeCluster(100, 3)
			c.feed(p)
			err := p.Sync(context.Background())
			switch {
			case tc.wantErr == nil && err != nil, tc.wantErr != nil && err == nil,
				tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("sync: %v, want %v", err, tc.wantErr)
			}
			if nl.calls == 0 {
				t.Fatal("nothing went to the netlink writer")
			}
			// An encoding left running would take its arenas a moment
			// later: look again after it had the time to.
			for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
				time.Sleep(wait)
				if n := nftables.ArenasInUse(p); n != 0 {
					t.Fatalf("%d bytes of arenas not given back %v after the sync", n, wait)
				}
			}
			st := nftables.NetlinkStatsOf(p)
			if st.BufferBytesPeak == 0 || st.BufferBytesResident > 4*256<<10 {
				t.Errorf("arenas: %+v, want some used and at most four kept resident", st)
			}
			resident := testutil.ToFloat64(m.FastWriterBufferBytes.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink, "resident"))
			mapped := testutil.ToFloat64(m.FastWriterBufferBytes.WithLabelValues("IPv4", metrics.WriterNFTablesNetlink, "mapped"))
			if resident != float64(st.BufferBytesResident) || mapped != float64(st.BufferBytesMapped) {
				t.Errorf("buffer metrics: resident %v, mapped %v; want the stats' %d and %d", resident, mapped, st.BufferBytesResident, st.BufferBytesMapped)
			}
		})
	}
}

// errAny stands for any error in a test table.
var errAny = errors.New("any error")
