package iptables_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	. "github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/iptables/iptablestest"
	"github.com/svcproxy/svcproxy/iptables/xtables"
	"github.com/svcproxy/svcproxy/proxy/engine"
)

// resyncProxier is a proxier over a fake that models backend's table
// watch, with five services written.
func resyncProxier(t *testing.T, backend string, wrap func(xtables.Runner) xtables.Runner) (*Proxier, *iptablestest.Fake) {
	t.Helper()
	fake := iptablestest.NewFake(v1.IPv4Protocol)
	fake.SetTableWatch(backend)
	var ipt xtables.Runner = fake
	if wrap != nil {
		ipt = wrap(fake)
	}
	p, err := NewProxier(Config{Common: engine.Common{NodeName: testNode}}, Interfaces{IPTables: ipt})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		name := fmt.Sprintf("s%d", i)
		p.OnServiceAdd(svc("ns", name, fmt.Sprintf("10.96.0.%d", i+1), nodePort(int32(30000+i))))
		p.OnEndpointSliceAdd(slice("ns", name, "", ep{ip: fmt.Sprintf("10.1.%d.1", i)}, ep{ip: fmt.Sprintf("10.1.%d.2", i)}))
	}
	p.OnServiceSynced()
	p.OnEndpointSlicesSynced()
	mustSync(t, p)
	return p, fake
}

// resync runs RequestFullSync + Sync and returns the listings and restores
// it made.
func resync(t *testing.T, p *Proxier, fake *iptablestest.Fake) (listings, restores int) {
	t.Helper()
	fake.ResetCalls()
	r0 := fake.Stats().Restores
	p.RequestFullSync()
	mustSync(t, p)
	if st := p.Stats().Last; !st.Full || st.Reason != engine.ReasonRequested {
		t.Fatalf("want a requested full sync, got %+v", st)
	}
	return fake.CallsOf("SaveInto"), fake.Stats().Restores - r0
}

func kubeSVCChain(t *testing.T, fake *iptablestest.Fake) xtables.Chain {
	t.Helper()
	var b bytes.Buffer
	if err := fake.SaveInto(context.Background(), xtables.TableNAT, &b); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if name, ok := strings.CutPrefix(l, ":KUBE-SVC-"); ok {
			name, _, _ = strings.Cut(name, " ")
			return xtables.Chain("KUBE-SVC-" + name)
		}
	}
	t.Fatal("no KUBE-SVC chain")
	return ""
}

// A full resync of tables nothing changed since our last write lists
// nothing and writes nothing (both modelled backends); partial syncs of
// ours keep the proof.
func TestResyncOfUnchangedTablesListsNothing(t *testing.T) {
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			p, fake := resyncProxier(t, backend, nil)
			// The cold start's proof covers its own commands (canaries,
			// jump rules) and restore.
			if l, r := resync(t, p, fake); l != 0 || r != 0 {
				t.Errorf("resync of unchanged tables: %d listings, %d restores; want none", l, r)
			}
			p.OnEndpointSliceUpdate(slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.2"}),
				slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.9"}))
			p.OnServiceDelete(svc("ns", "s3", "10.96.0.4", nodePort(30003)))
			mustSync(t, p)
			if p.Stats().Last.Full {
				t.Fatal("the endpoint change was a full sync")
			}
			want := fake.Dump()
			if l, r := resync(t, p, fake); l != 0 || r != 0 {
				t.Errorf("resync after partial syncs: %d listings, %d restores; want none", l, r)
			}
			if fake.Dump() != want {
				t.Error("the resync changed the tables")
			}
		})
	}
}

// Foreign changes (a chain added by hand, a rule of ours deleted, a chain
// of ours flushed) make the next resync list and repair. With the skip
// made unconditional this test fails.
func TestResyncAfterForeignChangeListsAndRepairs(t *testing.T) {
	ctx := context.Background()
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			p, fake := resyncProxier(t, backend, nil)
			resync(t, p, fake)
			want := fake.Dump()

			if _, err := fake.EnsureChain(ctx, xtables.TableFilter, "FOREIGN"); err != nil {
				t.Fatal(err)
			}
			if l, r := resync(t, p, fake); l == 0 || r != 0 {
				t.Errorf("after a foreign chain: %d listings, %d restores; want a listing, no restore", l, r)
			}
			if _, err := fake.EnsureRule(ctx, xtables.Prepend, xtables.TableFilter, "INPUT", "-j", "FOREIGN"); err != nil {
				t.Fatal(err)
			}
			resync(t, p, fake)
			if l, _ := resync(t, p, fake); l != 0 {
				t.Errorf("second resync after the foreign changes: %d listings, want none", l)
			}
			want = fake.Dump()

			c := kubeSVCChain(t, fake)
			if err := fake.FlushChain(ctx, xtables.TableNAT, c); err != nil {
				t.Fatal(err)
			}
			if l, r := resync(t, p, fake); l == 0 || r == 0 {
				t.Errorf("after a flush of %s: %d listings, %d restores; want both", c, l, r)
			}
			if got := fake.Dump(); got != want {
				t.Errorf("not repaired:\n%s", lineDiff(want, got))
			}
			if l, r := resync(t, p, fake); l != 0 || r != 0 {
				t.Errorf("resync after the repair: %d listings, %d restores; want none", l, r)
			}
		})
	}
}

// A fault in the engine's own incremental state (its record of a
// service's dispatch rules lost, so a partial sync inserts them twice) is
// repaired by the next steady resync, which lists nothing: the full render
// is diffed against the digests carried through our restores, and only
// the chain that differs is rewritten.
func TestSteadyResyncRepairsEngineStateFault(t *testing.T) {
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			p, fake := resyncProxier(t, backend, nil)
			resync(t, p, fake)
			ForgetDispatchRulesForTest(p, "ns", "s1")
			newSlice := slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.9"})
			p.OnEndpointSliceUpdate(slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.2"}), newSlice)
			mustSync(t, p)
			if p.Stats().Last.Full {
				t.Fatal("the endpoint change was a full sync")
			}
			// What a fresh proxier writes for the same objects.
			q, qfake := resyncProxier(t, backend, nil)
			q.OnEndpointSliceUpdate(slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.2"}), newSlice)
			q.RequestFullSync()
			mustSync(t, q)
			want := qfake.Dump()
			if fake.Dump() == want {
				t.Fatal("test setup: the fault left the tables right")
			}
			var payloads []string
			fake.SetRestoreHook(func(data []byte) error {
				payloads = append(payloads, string(data))
				return nil
			})
			if l, r := resync(t, p, fake); l != 0 || r != 1 {
				t.Errorf("steady resync after the fault: %d listings, %d restores; want 0, 1", l, r)
			}
			if got := fake.Dump(); got != want {
				t.Errorf("not repaired:\n%s", lineDiff(want, got))
			}
			if len(payloads) == 1 {
				for _, l := range strings.Split(payloads[0], "\n") {
					if strings.HasPrefix(l, ":") && !strings.HasPrefix(l, ":KUBE-SERVICES ") {
						t.Errorf("declared besides KUBE-SERVICES: %s", l)
					}
				}
			}
			if l, r := resync(t, p, fake); l != 0 || r != 0 {
				t.Errorf("resync after the repair: %d listings, %d restores; want none", l, r)
			}
		})
	}
}

// racingRunner makes a foreign change right after each of our restores,
// before the engine reads the generation or digest again.
type racingRunner struct {
	*iptablestest.Fake
	race bool
}

func (r *racingRunner) Restore(ctx context.Context, in xtables.RestoreInput) error {
	if err := r.Fake.Restore(ctx, in); err != nil {
		return err
	}
	if r.race {
		_, err := r.Fake.EnsureChain(ctx, xtables.TableNAT, "RACER")
		return err
	}
	return nil
}

func TestResyncAfterRacingChangeLists(t *testing.T) {
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			var rr *racingRunner
			p, fake := resyncProxier(t, backend, func(f xtables.Runner) xtables.Runner {
				rr = &racingRunner{Fake: f.(*iptablestest.Fake)}
				return rr
			})
			resync(t, p, fake)
			rr.race = true
			p.OnEndpointSliceUpdate(slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.2"}),
				slice("ns", "s1", "", ep{ip: "10.1.1.1"}, ep{ip: "10.1.1.9"}))
			mustSync(t, p)
			rr.race = false
			if l, _ := resync(t, p, fake); l == 0 {
				t.Error("resync after a change racing our restore listed nothing")
			}
		})
	}
}

// No watch (or a failing one): every full sync lists, as before.
func TestResyncWithoutWatchLists(t *testing.T) {
	p, fake := resyncProxier(t, "", nil)
	for range 2 {
		if l, _ := resync(t, p, fake); l == 0 {
			t.Error("resync without a table watch listed nothing")
		}
	}
	for _, backend := range []string{xtables.BackendNFT, xtables.BackendLegacy} {
		p, fake := resyncProxier(t, backend, nil)
		resync(t, p, fake)
		fake.FailOn("TableGeneration", 1, errors.New("no netlink"))
		fake.FailOn("TableDigest", 1, errors.New("no socket"))
		if l, _ := resync(t, p, fake); l == 0 {
			t.Errorf("%s: resync with a failing watch listed nothing", backend)
		}
	}
}

// With a digest proof (legacy), every legacyVerifyEvery-th resync lists
// anyway; the generation proof (nft) needs no such bound.
func TestLegacyResyncListsEveryFew(t *testing.T) {
	p, fake := resyncProxier(t, xtables.BackendLegacy, nil)
	var pattern []bool
	for range 8 {
		l, _ := resync(t, p, fake)
		pattern = append(pattern, l > 0)
	}
	want := []bool{false, false, false, true, false, false, false, true}
	if fmt.Sprint(pattern) != fmt.Sprint(want) {
		t.Errorf("listed per resync: %v, want %v", pattern, want)
	}
	q, qfake := resyncProxier(t, xtables.BackendNFT, nil)
	for i := range 8 {
		if l, _ := resync(t, q, qfake); l != 0 {
			t.Errorf("nft resync %d listed", i)
		}
	}
}

// TestPayloadsRestoredTyped: the engine hands its rendered payloads to the
// Runner with their lines typed (RestoreInput.Ops), full and partial syncs
// alike, so the in-process writer reads the ops instead of the text.
func TestPayloadsRestoredTyped(t *testing.T) {
	p, fake := resyncProxier(t, xtables.BackendLegacy, nil)
	st := fake.Stats()
	if st.TypedRestores == 0 || !bytes.Contains(st.LastRestore, []byte("KUBE-SVC-")) {
		t.Fatalf("first sync: %d of %d restores typed, the last %d bytes; want the services' payload typed", st.TypedRestores, st.Restores, len(st.LastRestore))
	}
	p.OnServiceAdd(svc("ns", "late", "10.96.0.99", nodePort(30099)))
	p.OnEndpointSliceAdd(slice("ns", "late", "", ep{ip: "10.1.99.1"}))
	mustSync(t, p)
	if got := fake.Stats(); got.TypedRestores != st.TypedRestores+1 || got.Restores != st.Restores+1 {
		t.Errorf("partial sync: typed restores %d -> %d, restores %d -> %d; want one more of each", st.TypedRestores, got.TypedRestores, st.Restores, got.Restores)
	}
}
