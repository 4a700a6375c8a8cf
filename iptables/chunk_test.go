package iptables_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
)

// A full sync restored in chunks (as on iptables-nft) leaves the tables
// exactly as one restore does, on an empty node and over another ruleset
// (chains rewritten, chains deleted); every chunk is a valid restore on
// its own (the fake rejects a jump to a chain not declared yet) and no
// chunk but the last holds the node-port tail rule.
func TestChunkedFullSyncSameTables(t *testing.T) {
	big := state{}
	for i := range 40 {
		big.services = append(big.services, benchService(i))
		big.slices = append(big.slices, benchSlice(i, 0))
	}
	other := state{}
	for i := 20; i < 50; i++ {
		other.services = append(other.services, benchService(i))
		other.slices = append(other.slices, benchSlice(i, 1))
	}
	cases := []struct {
		name   string
		family v1.IPFamily
		cfg    Config
		before *state
		st     state
	}{{name: "big", family: v1.IPv4Protocol, cfg: ipv4Config, st: big},
		{name: "big-over-other", family: v1.IPv4Protocol, cfg: ipv4Config, before: &other, st: big}}
	for _, g := range goldenStates {
		cases = append(cases, struct {
			name   string
			family v1.IPFamily
			cfg    Config
			before *state
			st     state
		}{g.name, g.family, g.cfg, nil, g.state})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ref, refFake := newTestProxier(t, c.cfg, c.family)
			c.st.load(ref)
			mustSync(t, ref)
			want := normalizedDump(refFake.Dump())

			p, fake := newTestProxier(t, c.cfg, c.family)
			if c.before != nil {
				c.before.load(p)
				mustSync(t, p)
				p, _ = newTestProxierOn(t, c.cfg, fake)
			}
			SetChunkChains(p, 3)
			var payloads [][]byte
			fake.SetRestoreHook(func(data []byte) error {
				payloads = append(payloads, bytes.Clone(data))
				return nil
			})
			c.st.load(p)
			mustSync(t, p)
			if len(payloads) < 2 && strings.HasPrefix(c.name, "big") {
				t.Fatalf("test setup: %d restores, want chunks", len(payloads))
			}
			for i, pl := range payloads[:len(payloads)-1] {
				if strings.Contains(string(pl), "NOTE: this must be the last rule") {
					t.Errorf("chunk %d of %d holds the node-port tail rule", i+1, len(payloads))
				}
			}
			if got := normalizedDump(fake.Dump()); got != want {
				t.Errorf("tables differ from one restore's:\n%s", lineDiff(want, got))
			}
		})
	}
}

// newTestProxierOn is a synced Proxier over an existing fake (a restart).
func newTestProxierOn(t *testing.T, cfg Config, fake *iptablestest.Fake) (*Proxier, *iptablestest.Fake) {
	t.Helper()
	p, err := NewProxier(withNode(cfg), Interfaces{IPTables: fake})
	if err != nil {
		t.Fatal(err)
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	return p, fake
}

// A chunked full sync that fails midway returns the chunk's error, leaves
// the earlier chunks applied, and the next sync (full) converges to the
// tables of one restore.
func TestChunkedFullSyncFailureMidway(t *testing.T) {
	big := state{}
	for i := range 40 {
		big.services = append(big.services, benchService(i))
		big.slices = append(big.slices, benchSlice(i, 0))
	}
	ref, refFake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	big.load(ref)
	mustSync(t, ref)
	want := normalizedDump(refFake.Dump())

	p, fake := newTestProxier(t, ipv4Config, v1.IPv4Protocol)
	SetChunkChains(p, 30)
	restores := 0
	boom := errors.New("boom")
	fake.SetRestoreHook(func(data []byte) error {
		if isBaseRestore(data) {
			return nil
		}
		restores++
		if restores == 3 {
			return boom
		}
		return nil
	})
	big.load(p)
	if err := p.Sync(context.Background()); !errors.Is(err, boom) || !strings.Contains(err.Error(), "chunk 3") {
		t.Fatalf("Sync = %v, want the third chunk's error", err)
	}
	fake.SetRestoreHook(nil)
	mustSync(t, p)
	if got := normalizedDump(fake.Dump()); got != want {
		t.Errorf("tables after the retry differ from one restore's:\n%s", lineDiff(want, got))
	}
}
