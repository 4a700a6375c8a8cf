//go:build linux

package iptables_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/proxytest"
)

// TestChunkedFullSyncSameTablesKernel is TestChunkedFullSyncSameTables
// against the real tools, on both backends (both chunk large full syncs):
// a full sync restored in chunks leaves nat and filter exactly as one
// restore of the same payload does, into an empty namespace and over
// another ruleset (chains flushed, rewritten and deleted).
func TestChunkedFullSyncSameTablesKernel(t *testing.T) {
	netnstest.SkipUnlessRoot(t)
	big := state{}
	for i := range 60 {
		big.services = append(big.services, benchService(i))
		big.slices = append(big.slices, benchSlice(i, 0))
	}
	other := state{}
	for i := 30; i < 80; i++ {
		other.services = append(other.services, benchService(i))
		other.slices = append(other.slices, benchSlice(i, 1))
	}
	for _, backend := range []string{xtables.BackendLegacy, xtables.BackendNFT} {
		for _, over := range []*state{nil, &other} {
			name := backend + "/empty"
			if over != nil {
				name = backend + "/over-other"
			}
			t.Run(name, func(t *testing.T) {
				// chunk 0: one restore (the reference); 50: a few
				// services (11 chains each) per restore.
				var want string
				for _, chunk := range []int{0, 50} {
					tables, restores := chunkedKernelSync(t, backend, over, big, chunk)
					if chunk == 0 {
						if restores != 1 {
							t.Fatalf("reference: %d restores, want 1", restores)
						}
						want = tables
						continue
					}
					if restores < 3 {
						t.Fatalf("chunked: %d restores, want several", restores)
					}
					t.Logf("%d restores", restores)
					if tables != want {
						t.Errorf("tables after %d chunked restores differ from one restore's:\n%s", restores, lineDiff(want, tables))
					}
				}
			})
		}
	}
}

// chunkedKernelSync syncs st into a new namespace (over before, synced
// first by another Proxier, when not nil) with restores of at most chunk
// new nat chains (0: one restore), and returns the nat and filter tables
// as iptables-save prints them (no counters) and the restores of st's sync.
func chunkedKernelSync(t *testing.T, backend string, before *state, st state, chunk int) (string, int) {
	t.Helper()
	env := netnstest.NewEnv(t, proxytest.DefaultTopology(v1.IPv4Protocol))
	ctx := context.Background()
	var tables string
	var restores int
	err := netnstest.Exec(env.Node, func() error {
		real, err := xtables.New(xtables.RunnerConfig{Family: v1.IPv4Protocol, Backend: backend})
		if err != nil {
			t.Skipf("iptables %s backend unavailable: %v", backend, err)
		}
		if before != nil {
			p, err := NewProxier(withNode(ipv4Config), Interfaces{IPTables: real})
			if err != nil {
				return err
			}
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			before.load(p)
			if err := p.Sync(ctx); err != nil {
				return fmt.Errorf("sync of the earlier ruleset: %w", err)
			}
		}
		rec := &restoreRecorder{Runner: real}
		p, err := NewProxier(withNode(ipv4Config), Interfaces{IPTables: rec})
		if err != nil {
			return err
		}
		SetChunkChains(p, chunk)
		p.OnServiceSynced()
		p.OnEndpointSlicesSynced()
		st.load(p)
		if err := p.Sync(ctx); err != nil {
			return err
		}
		restores = len(rec.payloads)
		var b bytes.Buffer
		for _, tb := range []xtables.Table{xtables.TableNAT, xtables.TableFilter} {
			if err := real.SaveInto(ctx, tb, &b); err != nil {
				return err
			}
		}
		var keep []string
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if strings.HasPrefix(l, ":") {
				if i := strings.Index(l, " ["); i >= 0 {
					l = l[:i] // built-in chains' packet counters
				}
			}
			keep = append(keep, l)
		}
		tables = strings.Join(keep, "\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tables, restores
}
